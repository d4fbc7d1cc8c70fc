"""The bench's loops keep the client's own collector out of the measured
phase: what the bench built before it is frozen for the phase's duration,
and given back after it, however the phase ends. A run counts its writes
minute by minute from its loop's start."""

from __future__ import annotations

import asyncio
import gc

import pytest

from bench.traffic import Run, closed_loop, open_loop
from reportsamples.reports import Resource

#: resources the recording driver never looks at
POOL: list[Resource] = [object()]  # type: ignore[list-item]


class Recording:
    """A driver that notes how many objects the collector leaves alone at
    each step."""

    def __init__(self, fail: bool = False) -> None:
        self.frozen: list[int] = []
        self.fail = fail

    async def step(self, res: object, run: Run, **_: object) -> None:
        self.frozen.append(gc.get_freeze_count())
        await asyncio.sleep(0)
        if self.fail:
            raise RuntimeError("the phase failed")

    async def create(self, res: object, run: Run) -> None:
        await self.step(res, run)


def _built_before() -> list[dict[str, object]]:
    return [{"report": i, "results": [{"rule": "r"}]} for i in range(1000)]


async def test_a_closed_loop_freezes_what_was_built_before_and_thaws_it() -> None:
    before = gc.get_freeze_count()
    kept = _built_before()
    driver = Recording()
    run = await closed_loop(driver, POOL * 2, concurrency=2, seed=True)  # type: ignore[arg-type]
    assert kept and min(driver.frozen) >= before + len(kept)
    assert gc.get_freeze_count() == before
    assert run.seconds > 0


async def test_an_open_loop_does_the_same() -> None:
    before = gc.get_freeze_count()
    kept = _built_before()
    driver = Recording()
    await open_loop(driver, POOL, rate=200, duration=0.02)  # type: ignore[arg-type]
    assert kept and driver.frozen and min(driver.frozen) >= before + len(kept)
    assert gc.get_freeze_count() == before


async def test_a_phase_that_fails_thaws_too() -> None:
    before = gc.get_freeze_count()
    with pytest.raises(RuntimeError):
        await closed_loop(Recording(fail=True), POOL, concurrency=1,  # type: ignore[arg-type]
                          duration=5)
    assert gc.get_freeze_count() == before


def test_writes_per_minute_count_each_minute_from_the_start() -> None:
    run = Run(started=1000.0, seconds=150.0)
    # 120 writes in the first minute, 60 in the second, 45 in the last 30 s
    run.completed = ([1000 + i * 0.5 for i in range(120)] + [1060 + i for i in range(60)]
                     + [1120 + i * 30 / 45 for i in range(45)])
    assert run.per_minute() == [2.0, 1.0, 1.5]


def test_a_last_minute_shorter_than_half_of_one_is_left_out() -> None:
    run = Run(started=0.0, seconds=89.0)
    run.completed = [float(i) for i in range(89)]
    assert run.per_minute() == [1.0]
