"""Point reads asked together: the reads that arrive while others are being
answered wait for them and then go as one query. A ClickHouse query costs
milliseconds of planning whatever it reads, so many clients reading single
keys cost about one query per round instead of one per key; a lone read
goes at once, as it would alone."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Hashable
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class Coalesced(Generic[K, V]):
    """``fetch`` answers a list of keys with what it found of them (a key
    missing from its answer reads as None); at most ``parallel`` fetches run
    at once."""

    def __init__(self, fetch: Callable[[list[K]], Awaitable[dict[K, V]]], *,
                 parallel: int = 2):
        self._fetch = fetch
        self._parallel = parallel
        self._waiting: dict[K, list[asyncio.Future[V | None]]] = {}
        #: fetchers running; each leaves it in the step that finds nothing
        #: waiting, so a read never waits with none to take it
        self._fetching: set[asyncio.Task[None]] = set()

    async def get(self, key: K) -> V | None:
        future: asyncio.Future[V | None] = asyncio.get_running_loop().create_future()
        self._waiting.setdefault(key, []).append(future)
        if len(self._fetching) < self._parallel:
            self._fetching.add(asyncio.create_task(self._drain()))
        return await future

    async def _drain(self) -> None:
        try:
            await self._fetch_waiting()
        finally:
            task = asyncio.current_task()
            assert task is not None
            self._fetching.discard(task)

    async def _fetch_waiting(self) -> None:
        while self._waiting:
            batch, self._waiting = self._waiting, {}
            try:
                found = await self._fetch(list(batch))
            except asyncio.CancelledError:
                for futures in batch.values():
                    for future in futures:
                        future.cancel()
                raise
            except Exception as err:  # noqa: BLE001 - each reader gets the failure
                for futures in batch.values():
                    for future in futures:
                        if not future.done():
                            future.set_exception(err)
                continue
            for key, futures in batch.items():
                for future in futures:
                    if not future.done():
                        future.set_result(found.get(key))

    async def close(self) -> None:
        for futures in self._waiting.values():
            for future in futures:
                future.cancel()
        for task in list(self._fetching):
            task.cancel()
        await asyncio.gather(*self._fetching, return_exceptions=True)
