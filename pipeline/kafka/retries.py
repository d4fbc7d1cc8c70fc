"""aiokafka logs every retry of a request as its own line: dozens a minute of
``NotEnoughReplicasError, retrying`` on a cluster with transaction
verification on, and, while a broker is down, thousands a minute of
``Unable connect to node``, ``Unable to update metadata`` and ``Failed
fetch messages``. Here each becomes
a count in ``/metrics`` (``reports_kafka_retries_total{error}``); a retried
produce is not logged at all (it succeeds, or its write fails and says so),
and the rest are logged once a minute for each broker or partition."""

from __future__ import annotations

import logging
import re
import time

from pipeline.observe import metrics

_CLASS = r"<class 'aiokafka\.errors\.(?P<error>\w+?)(?:Error)?'>"
#: an error as ``str()`` gives it: ``NodeNotReadyError: ...``, ``[Error 7] RequestTimedOutError``
_STR = r"(?:\[Error \d+\] )?(?P<error>\w+?)(?:Error)?(?::|$)"
#: (what aiokafka says, whether to log it once a minute; else never)
PATTERNS = (
    (re.compile(r"Got error produce response on (?P<key>.+), retrying\. Error: " + _CLASS),
     False),
    # a produce that met no answer (its leader's broker gone): retried after
    # the producer's backoff, milliseconds, until Kafka elects another leader
    (re.compile(r"^Got error produce response: " + _STR), False),
    (re.compile(r"^Cannot send (?P<key><class '[\w.]+'> to \S+): (?P<error>\w+?)(?:Error)?\("),
     True),
    (re.compile(r"^Unable connect to (?P<key>node with id \S+|\"[^\"]+\")"), True),
    # its metadata refresh while the brokers it knows are gone: every 25 ms
    (re.compile(r"^Unable to update metadata from (?P<key>\[[^\]]*\])"), True),
    (re.compile(r"^Failed fetch messages from (?P<key>\S+): " + _STR), True),
    (re.compile(r"^Attempt to fetch offsets for partition (?P<key>.+) failed due to: "
                + _CLASS), True),
    # a group looking for its coordinator while its broker is gone: every 50 ms
    (re.compile(r"^(?P<key>Group Coordinator Request failed|Heartbeat send request failed): "
                + _STR), True),
    # a group whose coordinator's broker is gone: said every 100 ms
    (re.compile(r"^(?P<key>Heartbeat failed for group \S+|Marking the coordinator dead"
                r" \(node \S+\)|Heartbeat session expired)(?P<error>)"), True),
)
#: seconds between two log lines of one kind about one broker or partition
LOG_INTERVAL = 60.0


class RetriesCounted(logging.Filter):
    """Counts the retries aiokafka logs instead of letting each through."""

    def __init__(self) -> None:
        super().__init__()
        self._logged: dict[tuple[int, str], float] = {}

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        for i, (pattern, once_a_minute) in enumerate(PATTERNS):
            found = pattern.search(message)
            if found is None:
                continue
            error = found.groupdict().get("error")
            error = "ConnectionFailed" if error is None else error or "CoordinatorLost"
            metrics.KAFKA_RETRIES.labels(error).inc()
            if not once_a_minute:
                return False
            key, now = (i, found.group("key")), time.monotonic()
            if now - self._logged.get(key, -LOG_INTERVAL) < LOG_INTERVAL:
                return False
            self._logged[key] = now
            return True
        return True


_FILTER = RetriesCounted()
LOGGERS = ("aiokafka", "aiokafka.producer.sender", "aiokafka.consumer.fetcher",
           "aiokafka.consumer.group_coordinator")


def count_retries() -> None:
    """Install the counting filter on aiokafka's loggers (once per process)."""
    for name in LOGGERS:
        logger = logging.getLogger(name)
        if _FILTER not in logger.filters:
            logger.addFilter(_FILTER)
