"""Kafka adapter: what every Kafka client of the project shares (batch and
request sizes, compression, timeouts, reading committed records only) and the
consumers it reads with. Importing it mends aiokafka where the project needs
it (``pipeline.kafka.internals``)."""

from __future__ import annotations

from typing import Any

from aiokafka import AIOKafkaConsumer

from pipeline.kafka import internals
from pipeline.model.topics import MAX_MESSAGE_BYTES

#: Producer batches: records sent together share one batch up to this size
#: (aiokafka's default of 16 KiB holds two reports).
MAX_BATCH_BYTES = 1024 * 1024
#: The largest produce request: a report body may be several MiB.
MAX_REQUEST_BYTES = MAX_MESSAGE_BYTES
#: Every producer compresses its batches: report JSON shrinks several times
#: (more in a batch of similar reports), on disk and on the wire; the broker
#: keeps batches as they come (the topics' compression.type is "producer").
COMPRESSION = "zstd"
#: Consumers see only committed transactions: the committer publishes every
#: change in a transaction, and a fenced committer's are aborted.
ISOLATION = "read_committed"
#: How soon a transaction's first AddPartitionsToTxn is asked again when the
#: coordinator answers CONCURRENT_TRANSACTIONS: it is still writing the last
#: transaction's markers, which takes a millisecond or two here. aiokafka
#: waits a fixed 20 ms (its BACKOFF_OVERRIDE, no setting; Kafka's Java client
#: does the same), which every transaction begun right after another, that is
#: every transaction of a busy committer, would wait.
CONCURRENT_TRANSACTIONS_BACKOFF_S = 0.002
internals.set_concurrent_transactions_backoff(CONCURRENT_TRANSACTIONS_BACKOFF_S)
# (uvloop) a write on a connection already closed fails as a broken connection
internals.fail_closed_writes_as_broken_connections()
# a consumer's stop() does not raise the cancellation of its own fetches
internals.stop_consumers_without_their_fetches_cancellation()

#: Where Kafka keeps consumer groups' offsets.
OFFSETS_TOPIC = "__consumer_offsets"
#: Where Kafka keeps transactions' state.
TRANSACTIONS_TOPIC = "__transaction_state"
#: How long the broker holds a fetch that finds no records.
IDLE_FETCH_WAIT_MS = 5000
#: How long a request to a broker may go unanswered before a client gives it
#: up and asks the cluster where to go: longer than a fetch is held
#: (IDLE_FETCH_WAIT_MS). aiokafka's default, 40 s, kept every write waiting
#: on a leader that had stopped (SIGSTOP) for as long as it stayed stopped,
#: although the cluster had moved its partitions after its session timeout
#: (9 s).
REQUEST_TIMEOUT_MS = 8000
#: ... for a client that sends no fetch: the committer's producer and the
#: clients of its take-over. A stopped broker keeps its connections open and
#: answers nothing; each request that went to it (a bootstrap picks a broker
#: at random) held a take-over for REQUEST_TIMEOUT_MS, three of them in a row.
QUICK_REQUEST_TIMEOUT_MS = 3000
#: How long a broker holds a fetch of a reader that writers wait on (a
#: take-over's read of the log's tail, the frontend's change-log cache, its
#: replies): shorter than QUICK_REQUEST_TIMEOUT_MS, which such a reader gives
#: up on a broker after.
TAIL_FETCH_WAIT_MS = 500
#: The committer's and the materializer's groups: a member is expelled after
#: this long without a heartbeat its coordinator saw (Kafka's default since
#: 3.0). With 10 s, a broker failover that took the group's coordinator
#: (9-16 s) expelled the committer just as it had taken over again, and the
#: rebalance and a second take-over cost 5 s more. A worker that is gone for
#: good loses its partitions after this; one started again under the same
#: REPORTS_INSTANCE_ID (static membership, as `up`) takes them back at once.
GROUP_SESSION_TIMEOUT_MS = 45000
#: How long a rebalance waits for members to join again: longer than a
#: batch in hand may take (the write timeout), shorter than a group
#: request may wait (aiokafka's 40 s: JoinGroup is answered once it is over).
GROUP_REBALANCE_TIMEOUT_MS = 20000
#: A consumer that works in batches anyway (the materializer, the agents)
#: fetches this much at a time, or what has arrived within BULK_FETCH_WAIT_MS.
BULK_FETCH_MIN_BYTES = 512 * 1024
BULK_FETCH_WAIT_MS = 400

def consumer(bootstrap: str, **options: Any) -> AIOKafkaConsumer:
    """A consumer of the pipeline's topics (committed records only). A fetch
    is answered as soon as records arrive; the long wait only spares an idle
    system's broker."""
    options = {"fetch_max_wait_ms": IDLE_FETCH_WAIT_MS, **options}
    if "group_id" not in options:
        # a group's JoinGroup waits for every member to join again, on the
        # same timeout (aiokafka has no separate one): groups keep the default
        options.setdefault("request_timeout_ms", REQUEST_TIMEOUT_MS)
    return AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False,
                            isolation_level=ISOLATION, **options)


def follower(bootstrap: str, **options: Any) -> AIOKafkaConsumer:
    """A :func:`consumer` that writers wait on: a fetch pending on a leader
    that stopped answering (SIGSTOP) is given up after
    QUICK_REQUEST_TIMEOUT_MS, not REQUEST_TIMEOUT_MS, and asked of the
    partition's next leader (with 8 s, a write waited for two such fetches
    after Kafka had moved the partition)."""
    return consumer(bootstrap, request_timeout_ms=QUICK_REQUEST_TIMEOUT_MS,
                    fetch_max_wait_ms=TAIL_FETCH_WAIT_MS, **options)
