"""The worker's Faust producer hands what its buffer holds (the tables'
changelog records) to Kafka without giving the event loop a turn a record:
under the frontend's load a turn takes a millisecond or more, and records
that each waited for three went out at a few hundred a second, slower than
the aggregation agent wrote them."""

from __future__ import annotations

import asyncio
from dataclasses import replace
from pathlib import Path

import pytest

from pipeline.worker import build_app

pytestmark = pytest.mark.integration
RECORDS = 600


async def test_buffered_records_go_out_without_a_turn_of_the_event_loop_each(
        start, make_settings, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    settings = make_settings()
    running = await start(settings)
    # the worker's app as the agent's process builds it (a group of its own,
    # beside that process), its producer alone started
    app = build_app(replace(settings, topic_prefix=f"{settings.topic_prefix}-own"),
                    running.system.aggregates, bootstrap=running.system.bootstrap,
                    data_dir=tmp_path)
    await app.producer.start()
    try:
        await _check(app, settings.topic_prefix)
    finally:
        await app.producer.stop()


async def _check(app, prefix: str) -> None:  # type: ignore[no-untyped-def]
    topic = app.topic(f"{prefix}-turns", key_serializer="raw",
                      value_serializer="raw", partitions=1)
    await topic.maybe_declare()
    sent = [topic.send_soon(key=b"k%d" % i, value=b"v") for i in range(RECORDS)]
    turns = 0
    async with asyncio.timeout(30):
        while app.producer.buffer.size:
            await asyncio.sleep(0)
            turns += 1
        # Faust's own topic asked for the producer through a stampede guard
        # that gave up three turns a record: 1,800 turns for these (the
        # buffer's own turns, of a millisecond each, take about ten)
        assert turns < RECORDS // 10
        # and every record is delivered
        offsets = [(await fut).offset for fut in sent]
    assert sorted(offsets) == list(range(RECORDS))
