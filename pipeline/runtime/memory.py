"""Giving freed memory back to the system. glibc's allocator keeps what a
process frees in its arenas (one per thread that allocates at the same time
as another, up to eight per core) for reuse, and returns it only from the top
of the main heap. The frontend, the worker and chDB's threads allocate and
free reports of ~6 KB all day, so the resident memory of a long-running
process crept up although neither Python's heap nor ClickHouse's tracked
memory grew. Two arenas for the process (``mallopt``) and ``malloc_trim``
from time to time, which returns the free pages of every arena, hold the
growth to a few MB a minute once the caches are full."""

from __future__ import annotations

import asyncio
import ctypes
import logging
import os
import time
from collections.abc import Callable

log = logging.getLogger(__name__)


#: glibc's mallopt parameter for the most arenas
M_ARENA_MAX = -8


def _glibc() -> ctypes.CDLL | None:
    """The C library, where it is glibc's (its malloc tunables are glibc's)."""
    try:
        return ctypes.CDLL("libc.so.6")
    except OSError:
        return None


def limit_arenas(arenas: int) -> bool:
    """At most ``arenas`` malloc arenas for the whole process, as
    ``MALLOC_ARENA_MAX`` would set (which wins when given). Called before the
    process starts its threads; returns whether the limit was set."""
    if arenas <= 0 or "MALLOC_ARENA_MAX" in os.environ:
        return False
    mallopt = getattr(_glibc(), "mallopt", None)
    return bool(mallopt is not None and mallopt(M_ARENA_MAX, arenas) == 1)


def _malloc_trim() -> Callable[[int], int] | None:
    """glibc's ``malloc_trim``, or None where the C library has none (musl)."""
    trim = getattr(_glibc(), "malloc_trim", None)
    if trim is None:
        return None
    trim.argtypes = [ctypes.c_size_t]
    trim.restype = ctypes.c_int
    return trim  # type: ignore[no-any-return]


async def trim_periodically(seconds: float, observe: Callable[[float], None] | None = None
                            ) -> None:
    """Every ``seconds``, return freed memory (on a thread: ctypes releases
    the GIL, so the event loop keeps running), telling ``observe`` the
    seconds each took; until cancelled."""
    if seconds <= 0:
        return
    trim = _malloc_trim()
    if trim is None:
        log.info("no malloc_trim in this C library: freed memory stays with the allocator")
        return
    while True:
        await asyncio.sleep(seconds)
        started = time.perf_counter()
        await asyncio.to_thread(trim, 0)
        if observe is not None:
            observe(time.perf_counter() - started)
