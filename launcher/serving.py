"""How a serving process runs: its event loop and its garbage collector."""

from __future__ import annotations

import asyncio
import gc
from collections.abc import Coroutine
from typing import Any

import uvloop

#: Collector thresholds of serving processes. A full collection walks every
#: live object (millions once the caches hold thousands of parsed reports) and
#: stops the process for 100-400 ms; with CPython's default (700, 10, 10) it ran
#: every few seconds under load and set the write p99. Young generations keep
#: their default; the oldest waits for a hundred times more of their runs.
GC_THRESHOLDS = (700, 10, 1000)


def serve(main: Coroutine[Any, Any, None]) -> None:
    """Run a serving process on uvloop: its event loop carries every request,
    Kafka record and agent step of the process."""
    gc.set_threshold(*GC_THRESHOLDS)
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        runner.run(main)
