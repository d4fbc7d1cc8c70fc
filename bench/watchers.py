"""The watch phase's watchers, in a process of their own.

A thousand watches deliver thousands of events a second; read in the
process that also paces the writes, their parsing delayed the writes' own
requests and stamped events late, and the lag measured the load generator
as much as the server. Here they have an event loop of their own, as the
watchers of a cluster have processes (and machines) of their own.

Protocol, one JSON or tab-separated line at a time:

* stdin: ``{"kubeconfig", "watches": [path, ...], "resource_version",
  "timeout"}``, then nothing until the watches are to stop (stdin closed);
* stdout: ``connected`` once every watch was accepted, then one line per
  event: ``index<TAB>namespace<TAB>name<TAB>resourceVersion<TAB>arrival``
  (``time.perf_counter()``: CLOCK_MONOTONIC, the same clock in every
  process of the machine); ``error<TAB>why`` if a watch failed.
"""

from __future__ import annotations

import asyncio
import sys
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import orjson
import uvloop

from bench.client import Client

#: how often what was received is written out (seconds): arrivals are
#: stamped as they come, so this only bounds how soon the parent knows
FLUSH_SECONDS = 0.05


async def serve(config: dict[str, Any], out: Callable[[bytes], None],
                stop: asyncio.Event) -> None:
    watches: list[str] = config["watches"]
    rv = config["resource_version"]
    timeout = int(config["timeout"])
    pending: list[bytes] = []
    connected = asyncio.Semaphore(0)
    async with Client(Path(config["kubeconfig"]), connections=0) as client:

        async def watch(i: int) -> None:
            collection = watches[i]
            path = (f"{collection}{'&' if '?' in collection else '?'}watch=1"
                    f"&resourceVersion={rv}&timeoutSeconds={timeout}")
            async for at, event in _events(client, path, connected):
                meta = event["object"]["metadata"]
                pending.append(b"%d\t%s\t%s\t%s\t%r\n" % (
                    i, meta.get("namespace", "").encode(), meta["name"].encode(),
                    meta["resourceVersion"].encode(), at))

        tasks = [asyncio.create_task(watch(i)) for i in range(len(watches))]
        # the first watch to end with an error ends them all (one the server
        # ends is not waited for)
        failed: asyncio.Future[None] = asyncio.get_running_loop().create_future()

        def ended(task: asyncio.Task[None]) -> None:
            if not task.cancelled() and task.exception() is not None and not failed.done():
                failed.set_exception(task.exception())  # type: ignore[arg-type]
        for t in tasks:
            t.add_done_callback(ended)
        stopping = asyncio.create_task(stop.wait())
        try:
            for _ in watches:
                await _first(connected.acquire(), stopping, failed)
            out(b"connected\n")
            while not stop.is_set():
                await _first(asyncio.sleep(FLUSH_SECONDS), stopping, failed)
                if pending:
                    out(b"".join(pending))
                    pending.clear()
        finally:
            stopping.cancel()
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)


async def _first(step: Any, stopping: asyncio.Task[Any], failed: asyncio.Future[None]
                 ) -> None:
    """Waits for ``step``, or the stop; a watch's error raises."""
    waited = asyncio.ensure_future(step)
    done, _ = await asyncio.wait([waited, stopping, failed],
                                 return_when=asyncio.FIRST_COMPLETED)
    if waited not in done:
        waited.cancel()
    if failed in done:
        failed.result()


async def _events(client: Client, path: str, connected: asyncio.Semaphore
                  ) -> AsyncIterator[tuple[float, Any]]:
    async with client.api.stream(path) as events:
        connected.release()
        async for event in events:
            yield time.perf_counter(), event


async def main() -> int:
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=2**24)
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    config = orjson.loads(await reader.readline())
    stop = asyncio.Event()

    async def until_closed() -> None:
        await reader.read()
        stop.set()

    closed = asyncio.create_task(until_closed())

    def out(data: bytes) -> None:
        sys.stdout.buffer.write(data)
        sys.stdout.buffer.flush()

    try:
        await serve(config, out, stop)
    except Exception as err:  # noqa: BLE001 - said to the parent, which raises it
        why = " ".join((str(err) or type(err).__name__).split())  # one line, no tabs
        out(b"error\t%s\n" % why.encode(errors="replace"))
        return 1
    finally:
        closed.cancel()
    return 0


if __name__ == "__main__":
    # on uvloop, as the server: a thousand TLS streams read on asyncio's own
    # loop took most of a core of the two the whole system shares
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        sys.exit(runner.run(main()))
