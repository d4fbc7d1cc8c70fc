"""The aggregation agent (the Faust worker) in a process of its own.

The frontend, the committer and the materializer share one event loop with a
whole core's work at a few hundred writes a second; the agent's batches added
a fifth to it, and every write waited its turns behind them. In a child
process the agent runs on the machine's other core. It reaches ClickHouse
through this parent (embedded chDB opens in one process only), for its five
calls of ``AggregateStore``, over a socket pair: length-prefixed pickles
between a parent and the child it started, trusted as the parent's own code.

The parent restarts a child that dies (it resumes from its committed offsets
and its tables' changelogs, as after any crash) and stops it with SIGTERM.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import os
import pickle
import signal
import socket
import struct
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from launcher.serving import serve
from pipeline.aggregate.agent import AggregateStore
from pipeline.clickhouse.connection import StoreError
from pipeline.clickhouse.reads import StoredObject
from pipeline.kafka import retries
from pipeline.runtime import memory
from pipeline.runtime.processes import die_with_parent
from pipeline.runtime.tasks import cancel
from pipeline.settings import Settings
from pipeline.worker import build_app

log = logging.getLogger(__name__)
#: what the child may call on the parent's store
CALLS = frozenset(name for name in dir(AggregateStore) if not name.startswith("_"))
_LENGTH = struct.Struct(">I")
#: a child that has not begun its work within this long fails the start of
#: the system (its tables' recovery, as long as they are large, comes after)
START_SECONDS = 120.0
#: how long a stopping child has to stop its Faust app before it is killed
STOP_SECONDS = 20.0
#: how long a child whose parent has gone has to stop
PARENT_GONE_SECONDS = 5.0
#: a child that died is started again after this long, doubled on each death
#: up to the last, and reset once one has run a minute
RESTART_SECONDS = (1.0, 30.0)


class AgentStartError(RuntimeError):
    """The agent's process died or hung before it was ready."""


async def _write(writer: asyncio.StreamWriter, message: tuple[Any, ...]) -> None:
    data = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
    writer.write(_LENGTH.pack(len(data)) + data)
    await writer.drain()


async def _read(reader: asyncio.StreamReader) -> tuple[Any, ...] | None:
    """The next message, or None once the other end has closed."""
    try:
        head = await reader.readexactly(_LENGTH.size)
        message = pickle.loads(await reader.readexactly(_LENGTH.unpack(head)[0]))
    except (asyncio.IncompleteReadError, ConnectionError):
        return None
    assert isinstance(message, tuple)
    return message


class StoreServer:
    """The parent's end: answers one child's store calls, each as it comes
    (the agent's refresh may call while a batch waits for its rows), and
    reports whether the child said it has started (its Faust app built,
    about to recover its tables) and whether it is ready (recovered, at
    work)."""

    def __init__(self, store: AggregateStore, reader: asyncio.StreamReader,
                 writer: asyncio.StreamWriter):
        self._store = store
        self._reader = reader
        self._writer = writer
        self.started = asyncio.Event()
        self.ready = asyncio.Event()
        self._calls: set[asyncio.Task[None]] = set()

    async def serve(self) -> None:
        """Until the child closes its end (it exited)."""
        began = time.monotonic()
        try:
            while (message := await _read(self._reader)) is not None:
                if message[0] == "started":
                    self.started.set()
                    began = time.monotonic()
                elif message[0] == "ready":
                    self.ready.set()
                    log.info("the aggregation agent recovered its tables in %.1f s",
                             time.monotonic() - began)
                elif message[0] == "call":
                    task = asyncio.create_task(self._answer(*message[1:]))
                    self._calls.add(task)
                    task.add_done_callback(self._calls.discard)
        finally:
            for task in list(self._calls):
                await cancel(task)
            self._writer.close()

    async def _answer(self, call_id: int, name: str, args: tuple[Any, ...],
                      kwargs: dict[str, Any]) -> None:
        try:
            if name not in CALLS:
                raise ValueError(f"no store call {name!r}")
            reply: tuple[Any, ...] = ("result", call_id, await getattr(self._store, name)(
                *args, **kwargs))
        except StoreError as err:
            reply = ("error", call_id, "StoreError", str(err))
        except Exception as err:
            log.exception("the aggregation agent's store call %s failed", name)
            reply = ("error", call_id, type(err).__name__, str(err))
        with contextlib.suppress(ConnectionError):
            await _write(self._writer, reply)


class RemoteStore:
    """The child's end: ``AggregateStore`` through the parent."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter):
        self._reader = reader
        self._writer = writer
        self._next = 0
        self._waiting: dict[int, asyncio.Future[Any]] = {}
        self.closed = asyncio.Event()
        self._task = asyncio.create_task(self._receive(), name="store-replies")

    async def _receive(self) -> None:
        try:
            while (message := await _read(self._reader)) is not None:
                kind, call_id, *rest = message
                fut = self._waiting.pop(call_id, None)
                if fut is None or fut.done():
                    continue
                if kind == "result":
                    fut.set_result(rest[0])
                else:
                    error, text = rest
                    fut.set_exception(StoreError(text) if error == "StoreError"
                                      else RuntimeError(f"{error}: {text}"))
        finally:
            self.closed.set()
            for fut in self._waiting.values():
                if not fut.done():
                    fut.set_exception(StoreError("the parent process has gone"))
            self._waiting.clear()

    async def _call(self, name: str, *args: Any, **kwargs: Any) -> Any:
        if self.closed.is_set():
            raise StoreError("the parent process has gone")
        self._next += 1
        fut = asyncio.get_running_loop().create_future()
        self._waiting[self._next] = fut
        await _write(self._writer, ("call", self._next, name, args, kwargs))
        return await fut

    async def started(self) -> None:
        await _write(self._writer, ("started",))

    async def ready(self) -> None:
        await _write(self._writer, ("ready",))

    async def close(self) -> None:
        self._writer.close()
        await cancel(self._task)

    async def watermark(self) -> int:
        return int(await self._call("watermark"))

    async def versions_before(self, resource: str, before: int, *,
                              after: tuple[str, str] | None = None, limit: int = 1000
                              ) -> list[tuple[StoredObject, bool]]:
        page: list[tuple[StoredObject, bool]] = await self._call(
            "versions_before", resource, before, after=after, limit=limit)
        return page

    async def write_policy_counts(self, rows: Sequence[Sequence[Any]]) -> None:
        await self._call("write_policy_counts", rows)

    async def write_policy_windows(self, rows: Sequence[Sequence[Any]]) -> None:
        await self._call("write_policy_windows", rows)

    async def write_policy_totals_windows(self, rows: Sequence[Sequence[Any]]) -> None:
        await self._call("write_policy_totals_windows", rows)


class AgentProcess:
    """The parent's handle on the agent's process: started by ``start``,
    started again whenever it dies, stopped by ``stop``. ``start`` does not
    wait for the agent to recover its tables (minutes, with a million
    reports): the API and the committer need nothing of it, and it catches
    up with the change log once recovered."""

    def __init__(self, settings: Settings, store: AggregateStore, *, bootstrap: str,
                 data_dir: Path):
        self._settings = settings
        self._store = store
        self._bootstrap = bootstrap
        self._data_dir = data_dir
        self._process: asyncio.subprocess.Process | None = None
        self._server: asyncio.Task[None] | None = None
        self._supervisor: asyncio.Task[None] | None = None
        self._stopping = False

    async def start(self) -> None:
        await self._spawn()
        self._supervisor = asyncio.create_task(self._supervise(), name="agent-process")

    async def _spawn(self) -> None:
        ours, theirs = socket.socketpair()
        try:
            self._process = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "launcher.agentprocess", str(theirs.fileno()),
                logging.getLevelName(logging.getLogger().getEffectiveLevel()),
                pass_fds=(theirs.fileno(),), preexec_fn=die_with_parent(),
                stdin=asyncio.subprocess.DEVNULL,
                # Ctrl-C signals the terminal's process group: this parent alone
                # gets it, and stops the agent in its turn
                start_new_session=True)
        finally:
            theirs.close()
        reader, writer = await asyncio.open_connection(sock=ours)
        # the settings over the socket, not in the command line that any
        # user of the machine may read (CLICKHOUSE_URL may hold a password)
        await _write(writer, ("start", dataclasses.asdict(self._settings), self._bootstrap,
                              str(self._data_dir)))
        server = StoreServer(self._store, reader, writer)
        self._server = asyncio.create_task(server.serve(), name="agent-store")
        started = asyncio.create_task(server.started.wait())
        try:
            done, _ = await asyncio.wait({started, self._server}, timeout=START_SECONDS,
                                         return_when=asyncio.FIRST_COMPLETED)
        finally:
            await cancel(started)
        if not server.started.is_set():
            await self._kill()
            raise AgentStartError("the aggregation agent's process"
                                  + (" exited before it started" if done
                                     else f" did not start in {START_SECONDS:g} s"))
        log.info("the aggregation agent runs in process %d; it recovers its tables",
                 self._process.pid)

    async def _supervise(self) -> None:
        delay = RESTART_SECONDS[0]
        while True:
            assert self._process is not None
            started = time.monotonic()
            code = await self._process.wait()
            if self._stopping:
                return
            await cancel(self._server)
            if time.monotonic() - started > 60:
                delay = RESTART_SECONDS[0]
            log.error("the aggregation agent's process exited (%s); starting it again in %g s",
                      code, delay)
            await asyncio.sleep(delay)
            delay = min(delay * 2, RESTART_SECONDS[1])
            try:
                await self._spawn()
            except (AgentStartError, OSError) as err:
                log.error("%s", err)

    async def stop(self) -> None:
        self._stopping = True
        await cancel(self._supervisor)
        process = self._process
        if process is not None and process.returncode is None:
            process.send_signal(signal.SIGTERM)
            try:
                async with asyncio.timeout(STOP_SECONDS):
                    await process.wait()
            except TimeoutError:
                log.error("the aggregation agent did not stop within %g s; killing it",
                          STOP_SECONDS)
                await self._kill()
        await cancel(self._server)

    async def _kill(self) -> None:
        if self._process is not None and self._process.returncode is None:
            self._process.kill()
            await self._process.wait()
        await cancel(self._server)


async def _child(fd: int) -> None:
    reader, writer = await asyncio.open_connection(sock=socket.socket(fileno=fd))
    started = await _read(reader)
    if started is None or started[0] != "start":
        raise SystemExit("the aggregation agent's process: no settings from its parent")
    _, values, bootstrap, data_dir = started
    settings = Settings(**values)
    memory.limit_arenas(settings.malloc_arenas)
    loop = asyncio.get_running_loop()
    parent = os.getppid()
    stop = asyncio.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    store = RemoteStore(reader, writer)
    trim = asyncio.create_task(memory.trim_periodically(settings.malloc_trim_seconds))
    app = build_app(settings, store, bootstrap=bootstrap, data_dir=Path(data_dir))
    await store.started()

    async def work() -> None:
        await app.start()  # its tables recovered, its agent at work
        await store.ready()
        await asyncio.Future()  # until stopped

    # a stop or the parent's death ends the process while its tables are
    # still recovering too (with a million reports, for minutes)
    working = asyncio.create_task(work(), name="agent")
    parent_gone = asyncio.create_task(store.closed.wait())
    stopped = asyncio.create_task(stop.wait())
    try:
        await asyncio.wait({working, parent_gone, stopped}, return_when=asyncio.FIRST_COMPLETED)
        if working.done():
            working.result()  # its start failed: say why
    finally:
        await cancel(parent_gone)
        await cancel(stopped)
        # Faust's stop can wait for ever once its agent crashed (it does when
        # the parent is gone mid-batch) and lets no timeout cancel it: the
        # process ends by this timer then. What it had not acknowledged is
        # done again from the committed offsets, as after any crash.
        gone = store.closed.is_set() or os.getppid() != parent
        _exit_within(PARENT_GONE_SECONDS if gone else STOP_SECONDS - 2)
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(STOP_SECONDS - 2):
                await cancel(working)
                await app.stop()
        await cancel(trim)
        await store.close()


def _exit_within(seconds: float) -> None:
    timer = threading.Timer(seconds, os._exit, args=(1,))
    timer.daemon = True
    timer.start()


def main(argv: list[str] | None = None) -> int:
    fd, level = (argv or sys.argv[1:])[:2]
    logging.basicConfig(level=level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    retries.count_retries()
    serve(_child(int(fd)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
