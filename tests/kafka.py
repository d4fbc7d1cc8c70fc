"""A real Apache Kafka broker for a whole test session, started the way
``reports-pipeline up`` starts its own, on an event loop of its own thread (the
tests' loops come and go; the broker must outlive them); and reading a topic
back."""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from aiokafka import TopicPartition

from launcher.broker.singlenode import KafkaBroker
from pipeline.kafka import clientconfig
from pipeline.kafka.tail import Tail


@contextlib.contextmanager
def running_broker(root: Path, *, timeout: float = 180) -> Iterator[str]:
    loop = asyncio.new_event_loop()
    broker = KafkaBroker(root)
    thread = threading.Thread(target=loop.run_forever, name="kafka-broker", daemon=True)
    thread.start()
    try:
        asyncio.run_coroutine_threadsafe(broker.start(), loop).result(timeout)
        yield broker.bootstrap
    finally:
        with contextlib.suppress(Exception):
            asyncio.run_coroutine_threadsafe(broker.stop(), loop).result(60)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout=10)
        loop.close()


async def committed(bootstrap: str, topic: str) -> list[Any]:
    """Every committed record of ``topic``'s partition 0, in order."""
    out: list[Any] = []
    async with Tail(clientconfig.consumer(bootstrap), TopicPartition(topic, 0)) as tail:
        async for records in tail.everything():
            out.extend(records)
    return out
