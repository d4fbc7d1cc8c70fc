"""A consumer's stop does not raise the cancellation of its own fetches: a
fetch that failed (its broker gone) waits out its retry backoff, and
aiokafka's fetcher close awaited it bare, raising its CancelledError to the
caller of ``consumer.stop()`` (aio-libs/aiokafka#647). A fleet's follower
ended so, for good, when its source's broker was restarted. The fetcher is
aiokafka's own, its fetch its own code; only the client is scripted."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import pytest
from aiokafka.consumer.fetcher import Fetcher
from aiokafka.consumer.subscription_state import SubscriptionState
from aiokafka.errors import NodeNotReadyError

import pipeline.kafka.clientconfig  # noqa: F401  (mends aiokafka's fetcher close)


class BrokerGone:
    """The client as a fetcher sees it while its broker is down."""

    def __init__(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._metadata_max_age_ms = 5000
        self.sent = asyncio.Event()

    async def send(self, node_id: int, request: object) -> object:
        self.sent.set()
        raise NodeNotReadyError(f"node {node_id} is not ready")


async def fetcher_with_a_failed_fetch() -> tuple[Fetcher, asyncio.Task[bool]]:
    client = BrokerGone()
    fetcher = Fetcher(client, SubscriptionState(), retry_backoff_ms=60_000)
    fetch = asyncio.create_task(
        fetcher._proc_fetch_request(None, 1, SimpleNamespace(topics=[])))
    await client.sent.wait()
    await asyncio.sleep(0)  # in its retry backoff now
    assert not fetch.done()
    # pending as the fetcher's routine leaves the fetches it started (added
    # only now: the routine, waiting for an assignment, cancels those it finds)
    fetcher._pending_tasks.add(fetch)
    return fetcher, fetch


def test_closing_a_fetcher_whose_fetch_failed_does_not_raise() -> None:
    async def scenario() -> None:
        fetcher, fetch = await fetcher_with_a_failed_fetch()
        await fetcher.close()
        assert fetch.cancelled()
        assert not fetcher._pending_tasks

    asyncio.run(scenario())


def test_the_callers_own_cancellation_still_goes_through() -> None:
    async def scenario() -> None:
        fetcher, _ = await fetcher_with_a_failed_fetch()
        started = asyncio.Event()

        async def stopping() -> None:
            started.set()
            await fetcher.close()

        closing = asyncio.create_task(stopping())
        await started.wait()
        closing.cancel()
        with pytest.raises(asyncio.CancelledError):
            await closing

    asyncio.run(scenario())
