"""pipeline.runtime.tasks.cancel ends the task and never swallows its caller's
cancellation."""

from __future__ import annotations

import asyncio

import pytest

from pipeline.runtime.tasks import cancel, cancelling


async def test_cancel_ends_the_task() -> None:
    task = asyncio.create_task(asyncio.Event().wait())
    await asyncio.sleep(0)
    await cancel(task)
    assert task.cancelled()


async def test_cancel_of_nothing_and_of_a_finished_task() -> None:
    await cancel(None)
    done = asyncio.create_task(asyncio.sleep(0, result=1))
    await done
    await cancel(done)
    assert done.result() == 1


async def test_a_caller_cancelled_while_it_waits_is_cancelled() -> None:
    release = asyncio.Event()
    waiting = asyncio.Event()

    async def slow_to_stop() -> None:
        try:
            await asyncio.Event().wait()
        finally:
            waiting.set()
            await release.wait()  # a task that takes its time to clean up

    inner = asyncio.create_task(slow_to_stop())
    await asyncio.sleep(0)
    after = []

    async def stopper() -> None:
        await cancel(inner)
        after.append("went on")  # must not run: this task was cancelled

    outer = asyncio.create_task(stopper())
    await waiting.wait()
    outer.cancel()
    with pytest.raises(asyncio.CancelledError):
        await outer
    assert after == []
    release.set()
    await asyncio.gather(inner, return_exceptions=True)


async def test_a_timeout_around_a_stop_is_a_timeout() -> None:
    async def never_stops() -> None:
        while True:
            try:
                await asyncio.Event().wait()
            except asyncio.CancelledError:
                if stubborn:
                    continue
                raise

    stubborn = True
    task = asyncio.create_task(never_stops())
    await asyncio.sleep(0)
    with pytest.raises(TimeoutError):
        async with asyncio.timeout(0.05):
            await cancel(task)
    stubborn = False
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)


async def test_what_the_task_ended_with_is_raised() -> None:
    async def fails_on_cancel() -> None:
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            raise RuntimeError("could not clean up") from None

    task = asyncio.create_task(fails_on_cancel())
    await asyncio.sleep(0)
    with pytest.raises(RuntimeError, match="could not clean up"):
        await cancel(task)


async def test_cancelling_tells_a_stop_from_a_cancellation_a_call_raised() -> None:
    async def stopping_a_consumer() -> None:
        raise asyncio.CancelledError  # as aiokafka's consumer stop raised its fetches'

    seen: list[bool] = []
    waiting = asyncio.Event()

    async def body() -> None:
        try:
            await stopping_a_consumer()
        except asyncio.CancelledError:
            seen.append(cancelling())
        try:
            waiting.set()
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            seen.append(cancelling())
            raise

    task = asyncio.create_task(body())
    await waiting.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert seen == [False, True]
