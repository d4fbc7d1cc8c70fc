"""Background tasks of the parts a process runs."""

from __future__ import annotations

import asyncio
import time
from typing import Any


async def cancel(task: asyncio.Task[Any] | None) -> None:
    """Cancel ``task`` (if any) and wait until it has ended; raises what it
    ended with, but not its cancellation.

    The wait is ``asyncio.wait``, not ``await task``: a caller cancelled while
    it waits (a timeout around a stop, the event loop closing) is cancelled at
    once, even when the task ignores its own cancellation; awaiting such a
    task directly would only cancel the task again and keep the caller
    waiting for ever.
    """
    if task is None:
        return
    task.cancel()
    await asyncio.wait({task})
    if not task.cancelled() and (error := task.exception()) is not None:
        raise error


def cancelling() -> bool:
    """Whether the current task was asked to end: a CancelledError caught
    there is its own. One raised by a call while nobody cancelled the task
    is a library's (aiokafka's consumer stop raised its own fetches',
    aio-libs/aiokafka#647) and a fault like any other, not an end."""
    task = asyncio.current_task()
    return task is not None and task.cancelling() > 0


#: How long a turn of background work lasts. A write waits for about a dozen
#: turns of the event loop (its request, the committer's three Kafka round
#: trips, each answer and the futures they resolve), and each of those waits
#: for whatever turns of background work are ready, so longer turns add to
#: every write in flight.
TURN_SECONDS = 0.001


class Turns:
    """Long synchronous work, such as a batch of a second's changes, done in
    turns: ``take()`` lets the event loop run whatever else is ready once the
    current turn has lasted ``seconds``. Requests wait at most about that long
    for it, and the work loses its place in the loop only that often."""

    def __init__(self, seconds: float = TURN_SECONDS):
        self._seconds = seconds
        self._began = time.perf_counter()

    async def take(self) -> None:
        if time.perf_counter() - self._began >= self._seconds:
            await asyncio.sleep(0)
            self._began = time.perf_counter()
