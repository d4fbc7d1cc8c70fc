"""Background tasks of the parts a process runs."""

from __future__ import annotations

import asyncio
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
