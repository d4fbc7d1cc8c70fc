"""How a serving process runs: its event loop, its garbage collector and its
threads' turns at the interpreter."""

from __future__ import annotations

import asyncio
import gc
import io
import logging
import signal
import sys
from collections.abc import Coroutine
from typing import Any

import uvloop

#: Collector thresholds of serving processes. A full collection walks every
#: live object (millions once the caches hold thousands of parsed reports) and
#: stops the process meanwhile; with CPython's default (700, 10, 10) it ran
#: every few seconds under load and set the write tail. Young generations keep
#: their default; the oldest waits for a hundred times more of their runs.
GC_THRESHOLDS = (700, 10, 1000)
#: Seconds a thread holds the interpreter (the GIL) while another waits for
#: it. The event loop's thread lets go of it at every TLS record, random
#: read and poll; a thread of the process with Python work at that moment
#: (the materializer encoding ClickHouse rows) then kept it for CPython's
#: default 5 ms, and every request in flight waited (docs/performance.md).
SWITCH_INTERVAL_S = 0.001


def serve(main: Coroutine[Any, Any, None]) -> None:
    """Run a serving process on uvloop: its event loop carries every request,
    Kafka record and agent step of the process."""
    gc.set_threshold(*GC_THRESHOLDS)
    sys.setswitchinterval(SWITCH_INTERVAL_S)
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        runner.get_loop().add_signal_handler(signal.SIGUSR1, dump_tasks)
        runner.run(main)


def freeze_startup() -> None:
    """The process has started: most of what it holds now (modules,
    classes, functions, settings, clients) lives as long as it does, so
    full collections stop walking it (``gc.freeze``). What of it is let go
    of later (the change-log cache's first events) is still freed by its
    reference count; only a cycle among it would stay. At a million
    reports a full collection of ``up`` took 0.6-1.1 s, and everything
    waited."""
    gc.collect()
    gc.freeze()


def dump_tasks() -> None:
    """SIGUSR1: log where each of the process's tasks waits (what a stuck
    part is waiting for, without stopping it)."""
    out = io.StringIO()
    tasks = asyncio.all_tasks()
    for task in sorted(tasks, key=lambda t: t.get_name()):
        print(f"-- task {task.get_name()}: {task.get_coro()!r}", file=out)
        task.print_stack(limit=12, file=out)
    logging.getLogger(__name__).warning("%d tasks (SIGUSR1):\n%s", len(tasks), out.getvalue())
