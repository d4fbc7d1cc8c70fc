"""Point reads asked together: a lone read goes at once; reads made while
one is in flight go as one fetch; each reader gets its own key's answer, or
the fetch's failure; a reader who gives up does not stop the others."""

from __future__ import annotations

import asyncio

import pytest

from pipeline.clickhouse.coalesce import Coalesced


class Fetches:
    def __init__(self) -> None:
        self.asked: list[list[str]] = []
        self.release = asyncio.Event()
        self.fail: Exception | None = None

    async def __call__(self, keys: list[str]) -> dict[str, str]:
        self.asked.append(sorted(keys))
        await self.release.wait()
        if self.fail is not None:
            raise self.fail
        return {k: k.upper() for k in keys if k != "missing"}


async def test_reads_made_while_one_is_in_flight_go_together() -> None:
    fetch = Fetches()
    reads = Coalesced(fetch, parallel=1)
    first = asyncio.create_task(reads.get("a"))
    await asyncio.sleep(0)  # the first fetch is under way, alone
    rest = [asyncio.create_task(reads.get(k)) for k in ("b", "c", "b", "missing")]
    await asyncio.sleep(0)
    fetch.release.set()
    assert await first == "A"
    assert await asyncio.gather(*rest) == ["B", "C", "B", None]
    assert fetch.asked == [["a"], ["b", "c", "missing"]]
    await reads.close()


async def test_parallel_fetches_share_the_waiting_reads() -> None:
    fetch = Fetches()
    reads = Coalesced(fetch, parallel=2)
    tasks = [asyncio.create_task(reads.get(k)) for k in "abcd"]
    await asyncio.sleep(0)
    fetch.release.set()
    assert await asyncio.gather(*tasks) == ["A", "B", "C", "D"]
    assert sorted(k for asked in fetch.asked for k in asked) == ["a", "b", "c", "d"]
    assert len(fetch.asked) <= 2
    await reads.close()


async def test_a_failed_fetch_fails_its_readers_and_the_next_goes_on() -> None:
    fetch = Fetches()
    reads = Coalesced(fetch, parallel=1)
    fetch.fail = RuntimeError("storage is down")
    fetch.release.set()
    with pytest.raises(RuntimeError, match="storage is down"):
        await reads.get("a")
    fetch.fail = None
    assert await reads.get("a") == "A"
    await reads.close()


async def test_a_reader_who_gives_up_leaves_the_others_their_answers() -> None:
    fetch = Fetches()
    reads = Coalesced(fetch, parallel=1)
    gone = asyncio.create_task(reads.get("a"))
    stays = asyncio.create_task(reads.get("a"))
    await asyncio.sleep(0)
    gone.cancel()
    fetch.release.set()
    assert await stays == "A"
    assert gone.cancelled()
    await reads.close()
