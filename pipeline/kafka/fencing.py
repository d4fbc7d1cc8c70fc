"""Kafka adapter: a broker Kafka has fenced is dropped by every client of the
process at once, not when each request to it has timed out.

A broker that stops answering but keeps its connections open (SIGSTOP, a
machine that hangs, a full GC) is fenced by the controller after its session
(``broker.session.timeout.ms``, 9 s by default), and its partitions and
coordinators move to the others. A client learns that only from a request
that fails: every request already sent to that broker waits out its timeout
first (3 s for the committer's producer, 8 s for the rest, and a fetch's
connection is the one its reply comes back on), and so do the writes behind
it. Measured with the change log's leader stopped for 30 s: Kafka had
fenced it 8.4 s after it stopped, and writes were acknowledged again only
4.7 s later.

Here one task per process asks the cluster, twice a second, which
brokers it has registered and not fenced (a Metadata request naming no
topic: the brokers only), and takes every other broker out of the metadata
of each of the process's clients of that cluster, closing their connections
to it. The requests waiting on it fail as broken connections, which aiokafka
retries at once with fresh metadata, on the partitions' new leaders. A
client whose metadata lacks a broker that serves (one back from being
fenced) is made to ask for it again: aiokafka connects only to brokers in
its metadata, and its coordinator lookup, told of such a broker, retries
without asking (in a fault run `up` stood still for minutes so, once the
two brokers it had lost came back and took their partitions back).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random

from aiokafka.client import AIOKafkaClient
from aiokafka.errors import KafkaError
from aiokafka.protocol.metadata import MetadataRequest

from pipeline.kafka import internals
from pipeline.runtime.tasks import cancel

log = logging.getLogger(__name__)

#: How often the cluster is asked which brokers serve, and how long one
#: broker may take to answer before the next is asked.
EVERY_SECONDS = 0.5
ASK_TIMEOUT_MS = 1000


def servers(bootstrap: str | list[str]) -> frozenset[str]:
    """The ``host:port`` of a bootstrap list, as aiokafka takes it (a comma
    separated string, or a list). Pure."""
    items = bootstrap.split(",") if isinstance(bootstrap, str) else bootstrap
    return frozenset(s.strip() for s in items if s.strip())


class FencedBrokers:
    """The task that drops fenced brokers from the clients of ``bootstrap``'s
    cluster in this process (each made after :func:`internals.track_clients`,
    which :meth:`start` calls)."""

    def __init__(self, bootstrap: str, *, every: float = EVERY_SECONDS):
        self._bootstrap = bootstrap
        self._servers = servers(bootstrap)
        self._every = every
        self._client: AIOKafkaClient | None = None
        self._task: asyncio.Task[None] | None = None
        #: the brokers dropped, and not yet seen serving again
        self.fenced: set[int] = set()
        #: the brokers serving, as the cluster last said
        self.serving: set[int] = set()
        self._answered: int | None = None
        self._bootstrapped = False

    async def start(self) -> None:
        internals.track_clients()
        self._client = AIOKafkaClient(bootstrap_servers=self._bootstrap,
                                      request_timeout_ms=ASK_TIMEOUT_MS,
                                      client_id="reports-fenced-brokers")
        self._task = asyncio.create_task(self._run(), name="fenced-brokers")

    async def stop(self) -> None:
        if self._task is not None:
            await cancel(self._task)
        if self._client is not None:
            with contextlib.suppress(KafkaError, OSError):
                await self._client.close()

    async def _run(self) -> None:
        """Until cancelled. The watch is a help, not a part writes need: a
        round that fails (Kafka unreachable, a client in a state not foreseen)
        is said once and the next one tried."""
        assert self._client is not None
        said = False
        while True:
            try:
                if not self._bootstrapped:
                    await self._client.bootstrap()
                    self._bootstrapped = True
                live = await self._ask(self._client)
                if live:
                    self.serving = live
                    self.drop_all_but(live)
            except Exception as err:  # noqa: BLE001 - said once, then tried again
                if not said:
                    log.warning("asking Kafka which brokers serve failed (%r); trying again"
                                " every %g s", err, self._every)
                    said = True
            await asyncio.sleep(self._every)

    async def _ask(self, client: AIOKafkaClient) -> set[int] | None:
        """The brokers the cluster has registered and not fenced, as the first
        broker to answer says (None: none answered)."""
        nodes = [b.nodeId for b in client.cluster.brokers()]
        random.shuffle(nodes)
        # the last to answer first: a broker that stopped answering costs an
        # ask's timeout only when it is the one that stopped
        nodes.sort(key=lambda n: n != self._answered)
        for node in nodes:
            try:
                response = await client.send(node, MetadataRequest([]))
            except (KafkaError, TimeoutError, OSError):
                continue
            if response.brokers:
                client.cluster.update_metadata(response)  # ask one of these next
                self._answered = node
                return {int(b[0]) for b in response.brokers}
        return None

    def drop_all_but(self, live: set[int]) -> None:
        """Take every broker but ``live`` out of this cluster's clients, and
        have each client that lacks one of ``live`` in its metadata (one
        back from being fenced) ask for its metadata again."""
        dropped: set[int] = set()
        for client in internals.clients():
            if client is self._client or servers(internals.bootstrap_of(client)) \
                    != self._servers:
                continue
            gone = internals.known_brokers(client) - live
            if gone:
                internals.forget_brokers(client, gone)
                dropped |= gone
            elif live - (internals.brokers_in_metadata(client) or live):
                internals.refresh_metadata(client)
        for node in sorted(dropped - self.fenced):
            log.warning("Kafka has fenced broker %d: its connections are dropped, and its"
                        " partitions' requests go to their new leaders", node)
        self.fenced = (self.fenced | dropped) - live
