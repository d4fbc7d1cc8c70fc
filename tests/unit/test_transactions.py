"""How the committer ends the transactions an earlier producer of its
transactional.id left hanging, and where its group's offsets live."""

from __future__ import annotations

import pytest
from aiokafka import TopicPartition

from pipeline.kafka import transactions
from pipeline.kafka.transactions import (
    ActiveProducer,
    CoordinatorView,
    TransactionAdminError,
    coordinator_partition,
    hanging,
    retrying,
)

CHANGES = TopicPartition("p.changes", 0)
REPLIES = TopicPartition("p.replies", 0)


def producer(pid: int, epoch: int, start: int = 10) -> ActiveProducer:
    return ActiveProducer(producer_id=pid, producer_epoch=epoch, coordinator_epoch=0,
                          last_timestamp=0, txn_start_offset=start)


def view(state: str, pid: int = 1, epoch: int = 0) -> CoordinatorView:
    return CoordinatorView(state=state, producer_id=pid, producer_epoch=epoch,
                           partitions=frozenset())


def test_a_transaction_the_coordinator_committed_is_committed() -> None:
    found = {CHANGES: [producer(1, 0)], REPLIES: [producer(1, 0, start=4)]}
    for state in ("CompleteCommit", "PrepareCommit"):
        ended = hanging(found, view(state), producer_id=1, epoch=1)
        assert [(h.tp, h.commit) for h in ended] == [(CHANGES, True), (REPLIES, True)]
    assert "committed the hanging transaction of producer 1 epoch 0 on p.changes-0" \
        " (open since offset 10)" == str(ended[0])


def test_anything_else_is_aborted() -> None:
    found = {CHANGES: [producer(1, 0)]}
    # a timed-out transaction is aborted at a new epoch: the one left open is older
    assert not hanging(found, view("CompleteAbort", epoch=1), producer_id=1, epoch=2)[0].commit
    for before in (view("Ongoing"), view("CompleteAbort"), view("Empty"), None,
                   view("CompleteCommit", epoch=3)):
        [ended] = hanging(found, before, producer_id=1, epoch=4)
        assert not ended.commit, before


def test_only_earlier_producers_of_the_id_count() -> None:
    found = {CHANGES: [producer(7, 0), producer(1, 2), producer(1, 1, start=-1)]}
    # another id's transaction, the new producer's own, and a closed one
    assert hanging(found, view("CompleteCommit", epoch=1), producer_id=1, epoch=2) == []
    # a new producer id (the epoch ran out): the earlier id's transaction is hanging
    found = {CHANGES: [producer(1, 5)]}
    [ended] = hanging(found, view("CompleteCommit", epoch=5), producer_id=9, epoch=0)
    assert ended.commit


def test_coordinator_partition_is_the_group_coordinators() -> None:
    # Java: "foo".hashCode() == 101574; "polygenelubricants".hashCode() == Integer.MIN_VALUE
    assert coordinator_partition("foo", 50) == 101574 % 50
    assert coordinator_partition("polygenelubricants", 50) == 0
    # (from jshell) a negative hash, and one over UTF-16 units
    assert coordinator_partition("e2e-committer", 50) == 15  # -257540715
    assert coordinator_partition("é-group-ü", 50) == 28  # 1180386378
    assert coordinator_partition("x", 1) == 0


async def test_a_partition_still_loading_is_asked_again(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(transactions, "RETRY_BACKOFF_SECONDS", 0)
    answers = [transactions._refused(6, "describing the producers of p.changes-0"),
               transactions._refused(3, "describing the producers of p.changes-0"), "found"]

    async def ask() -> str:
        answer = answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer

    # NotLeaderForPartition (6), then UnknownTopicOrPartition (3): both retriable
    assert await retrying(ask) == "found"


async def test_a_final_refusal_or_a_long_one_stands(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(transactions, "RETRY_BACKOFF_SECONDS", 0)
    calls = 0

    async def refused(code: int) -> None:
        nonlocal calls
        calls += 1
        raise transactions._refused(code, "describing transaction t")

    with pytest.raises(TransactionAdminError, match="TransactionalIdAuthorizationFailed"):
        await retrying(lambda: refused(53))
    assert calls == 1
    with pytest.raises(TransactionAdminError, match="NotLeaderForPartitionError"):
        await retrying(lambda: refused(6), seconds=0)
