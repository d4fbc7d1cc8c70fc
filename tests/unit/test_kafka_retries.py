"""aiokafka's per-retry log lines become counts in /metrics: a retried produce
is never logged, an unreachable broker once a minute."""

from __future__ import annotations

import logging

import pytest
from aiokafka.errors import NodeNotReadyError, RequestTimedOutError
from aiokafka.protocol.transaction import EndTxnRequest

from pipeline.kafka import retries
from pipeline.observe import metrics


def _count(error: str) -> float:
    return metrics.KAFKA_RETRIES.labels(error)._value.get()  # type: ignore[no-any-return]


def test_retries_are_counted_not_logged(caplog: pytest.LogCaptureFixture,
                                        monkeypatch: pytest.MonkeyPatch) -> None:
    # a filter of its own, alone: a process that started the system earlier
    # (the suite's other tests) has the shared one installed
    saved = {name: list(logging.getLogger(name).filters) for name in retries.LOGGERS}
    for name, filters in saved.items():
        logging.getLogger(name).filters = [
            f for f in filters if not isinstance(f, retries.RetriesCounted)]
    monkeypatch.setattr(retries, "_FILTER", retries.RetriesCounted())
    retries.count_retries()
    sender = logging.getLogger("aiokafka.producer.sender")
    client = logging.getLogger("aiokafka")
    fetcher = logging.getLogger("aiokafka.consumer.fetcher")
    before = (_count("NotEnoughReplicas"), _count("ConnectionFailed"), _count("NodeNotReady"),
              _count("RequestTimedOut"))
    caplog.set_level(logging.WARNING)
    try:
        for _ in range(5):
            # aiokafka's words, as 0.14 logs them
            sender.warning("Got error produce response on topic-partition %s, retrying. Error: %s",
                           "TopicPartition(topic='reports.changes', partition=0)",
                           "<class 'aiokafka.errors.NotEnoughReplicasError'>")
            client.error("Unable connect to node with id %s: %s", 2,
                         "[Errno 111] Connection refused")
        client.error("Unable connect to node with id %s: %s", 3, "[Errno 111] Connection refused")
        for _ in range(3):
            client.error("Unable to update metadata from %s", [1, 3])
        for _ in range(4):
            sender.warning("Got error produce response: %s", "NodeNotReadyError: Attempt to send a"
                           " request to node which is not ready (node id 1).")
            sender.warning("Got error produce response: %s", RequestTimedOutError())
            fetcher.error("Failed fetch messages from %s: %s", 3, RequestTimedOutError())
            sender.warning("Cannot send %r to %s: %r", EndTxnRequest, 1,
                           NodeNotReadyError("Attempt to send a request to node which is not"
                                             " ready (node id 1)."))
        group = logging.getLogger("aiokafka.consumer.group_coordinator")
        for _ in range(3):
            group.warning("Heartbeat failed for group %s: coordinator (node %s) is either not"
                          " started or not valid", "reports-committer", 3)
            group.error("Group Coordinator Request failed: %s", NodeNotReadyError(
                "Attempt to send a request to node which is not ready (node id 3)."))
        sender.warning("something else entirely")
    finally:
        for name, filters in saved.items():
            logging.getLogger(name).filters = filters
    assert (_count("NotEnoughReplicas") - before[0], _count("ConnectionFailed") - before[1],
            _count("NodeNotReady") - before[2], _count("RequestTimedOut") - before[3]) \
        == (5, 9, 11, 8)
    logged = [r.getMessage() for r in caplog.records]
    assert not any("retrying" in m for m in logged)
    assert sum("node with id 2" in m for m in logged) == 1  # once a minute
    assert sum("node with id 3" in m for m in logged) == 1
    assert sum("Heartbeat failed" in m for m in logged) == 1
    assert sum("Group Coordinator Request failed" in m for m in logged) == 1
    assert sum("Unable to update metadata" in m for m in logged) == 1
    assert not any("Got error produce response" in m for m in logged)
    assert sum("EndTxnRequest" in m for m in logged) == 1
    assert sum("Failed fetch messages" in m for m in logged) == 1
    assert "something else entirely" in logged
