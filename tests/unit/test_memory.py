"""The periodic malloc_trim: glibc's function is found and called on schedule."""

from __future__ import annotations

import asyncio
import platform

import pytest

from pipeline.runtime import memory


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="malloc_trim is glibc's")
def test_glibc_malloc_trim_is_found_and_runs() -> None:
    trim = memory._malloc_trim()
    assert trim is not None
    assert trim(0) in (0, 1)  # 1: memory was returned


async def test_trims_on_schedule_until_cancelled(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[int] = []
    twice = asyncio.Event()

    def trim(pad: int) -> int:
        calls.append(pad)
        if len(calls) >= 2:
            twice.set()
        return 1

    monkeypatch.setattr(memory, "_malloc_trim", lambda: trim)
    task = asyncio.create_task(memory.trim_periodically(0.01))
    await asyncio.wait_for(twice.wait(), 10)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert calls[:2] == [0, 0]


async def test_zero_seconds_never_trims(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(memory, "_malloc_trim", lambda: pytest.fail("looked up"))
    await asyncio.wait_for(memory.trim_periodically(0), 1)


def test_arena_limit_leaves_an_explicit_malloc_arena_max(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MALLOC_ARENA_MAX", "4")
    assert not memory.limit_arenas(2)
    monkeypatch.delenv("MALLOC_ARENA_MAX")
    assert not memory.limit_arenas(0)


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="mallopt is glibc's")
def test_arena_limit_is_set_on_glibc(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MALLOC_ARENA_MAX", raising=False)
    assert memory.limit_arenas(8)  # glibc's own default on this machine's cores or more
