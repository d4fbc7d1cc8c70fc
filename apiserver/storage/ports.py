"""The frontend's storage boundary: what the API needs from storage, as
``typing.Protocol``s the frontend owns.

The adapters live in the pipeline and are chosen where a process is wired
(``launcher.system``): ``pipeline.clickhouse.reads.ObjectReads`` reads
objects, ``pipeline.clickhouse.analytics.AnalyticsQueries`` answers
analysts, ``pipeline.serving.writes.Writer`` submits
writes, ``pipeline.serving.changelog.ChangeLog`` is the change feed. The
unit tests' in-memory fakes satisfy the same protocols.

Values crossing the boundary are the model's (``pipeline.model``), and so are
the errors a port raises (``pipeline.model.storage``: ``Unavailable``,
``Refused``, ``Expired``, ``StoreError``, ``QueryError``); the frontend maps
them to Kubernetes ``Status`` objects in ``apiserver.contract.failures``. Nothing here
(nor anywhere in ``apiserver``) imports a driver, the Kafka adapter or the
committer: the import-linter contracts in pyproject.toml check it.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Protocol

from pipeline.model.cache import Cached, Event, Key, Scope, Subscription
from pipeline.model.messages import Reply, WriteRequest
from pipeline.model.storage import StoredObject

__all__ = ["AnalyticsQueries", "ChangeFeed", "ObjectReader", "WriteSubmitter"]


class ObjectReader(Protocol):
    """The objects ClickHouse holds (its ``FINAL`` view), read in key order.
    Raises ``StoreError`` when ClickHouse cannot answer."""

    async def get(self, resource: str, namespace: str, name: str) -> StoredObject | None:
        """The object's latest stored version, unless that is its deletion."""
        ...

    async def list_page(self, resource: str, *, namespace: str | None,
                        conditions: Sequence[str] = (), params: dict[str, Any] | None = None,
                        after: tuple[str, str] | None = None, limit: int = 1000
                        ) -> list[StoredObject]:
        """Current objects in (namespace, name) order after ``after``:
        ``limit`` of them, fewer only at the end. ``conditions`` are SQL
        referencing the bound ``params`` (``apiserver.contract.selectors`` builds both)."""
        ...

    async def versions(self, resource: str, wanted: Sequence[tuple[str, str, int]]
                       ) -> dict[tuple[str, str], StoredObject]:
        """The given (namespace, name, resourceVersion) versions, while they
        are still stored."""
        ...


class WriteSubmitter(Protocol):
    """The committer, wherever it runs."""

    async def submit(self, request: WriteRequest) -> Reply:
        """The committer's reply to ``request`` once its change is committed
        (or, for a dry run, decided). Raises ``Refused`` with the Status the
        committer decided, or ``Unavailable`` (with Retry-After) when the
        write could not be confirmed in time."""
        ...


class ChangeFeed(Protocol):
    """The change log's tail held in memory (a watch cache): fresh reads,
    read-your-writes and watches. Its waits raise ``Unavailable`` when they
    time out; a resourceVersion older than its history raises ``Expired``."""

    @property
    def resource_version(self) -> int:
        """The highest resourceVersion read."""
        ...

    @property
    def stored(self) -> int:
        """The resourceVersion up to which ClickHouse holds every change, as
        last learnt (a read of ClickHouse begun now misses no older change)."""
        ...

    def holds_after(self, rv: int) -> bool:
        """Whether the cache still holds every change after ``rv``."""
        ...

    async def sync(self, *, settle: bool = True) -> None:
        """Until every change committed before the call is read (and, with
        ``settle``, ClickHouse holds everything older than the cache)."""
        ...

    async def settled(self) -> None:
        """Until ClickHouse holds every change older than the cache."""
        ...

    async def wait_for(self, rv: int, timeout: float | None = None) -> None:
        """Until the change with resourceVersion ``rv`` is read."""
        ...

    async def admit(self) -> None:
        """Backpressure for writes: until the materializer is near enough."""
        ...

    async def committed(self, key: Key, rv: int) -> Cached:
        """The change of ``key`` at ``rv``, once read: what a writer answers."""
        ...

    def latest(self, key: Key) -> Cached | None:
        """The cached latest change of ``key``, if the cache holds one."""
        ...

    async def below(self, key: Key, read: Callable[[], Awaitable[StoredObject | None]]
                    ) -> StoredObject | None:
        """The latest version of a key ``latest`` does not hold (None when
        there is none): kept in memory, or else ``read`` once ClickHouse holds
        every change older than the cache."""
        ...

    def newest(self, resource: str, namespace: str | None,
               after: tuple[str, str] | None = None, upto: tuple[str, str] | None = None
               ) -> list[tuple[Key, Cached]]:
        """The latest change of each key past ``after`` up to ``upto``, in key order."""
        ...

    def first_changes(self, resource: str, namespace: str | None, since: int,
                      after: tuple[str, str] | None, upto: tuple[str, str] | None = None
                      ) -> dict[tuple[str, str], Event]:
        """The first change after ``since`` of each key past ``after`` up to ``upto``."""
        ...

    def subscribe(self, since: int, scope: Scope, *, limit: int = 10000
                  ) -> tuple[list[Event], Subscription]:
        """The cached events of ``scope`` after ``since``, and every later one."""
        ...

    def unsubscribe(self, sub: Subscription) -> None:
        ...


class AnalyticsQueries(Protocol):
    """Read-only, bounded SQL for analysts (``apiserver.http.analytics``). Raises
    ``QueryError`` (``AnalyticsTimeout`` when stopped for its time) or
    ``StoreError``."""

    async def analytics(self, sql: str, parameters: dict[str, Any] | None = None, *,
                        tag: str = "") -> tuple[list[str], list[tuple[Any, ...]]]:
        """(column names, rows); ``tag`` names the query for ``cancel_analytics``."""
        ...

    async def cancel_analytics(self, tag: str) -> None:
        ...
