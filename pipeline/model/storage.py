"""What the frontend's storage hands back and the errors it reports: plain
values, no I/O.

The adapters (``pipeline.clickhouse``, ``pipeline.serving``) raise these
errors, translating their drivers' own; the frontend maps them to
Kubernetes ``Status`` objects in one place (``apiserver.contract.failures``) and
never sees a driver's or the committer's exceptions.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

JSON = dict[str, Any]


class StorageError(Exception):
    """Storage could not do what was asked."""


class Unavailable(StorageError):
    """Storage cannot answer now (Kafka unreachable, the change log or the
    materializer behind, a write not confirmed in time); the client may try
    again after ``retry_after`` seconds."""

    def __init__(self, message: str, *, retry_after: int = 1):
        super().__init__(message)
        self.message = message
        self.retry_after = retry_after


class Refused(StorageError):
    """The committer decided against a write (AlreadyExists, NotFound,
    Conflict, Invalid...): its answer, a Kubernetes ``Status``."""

    def __init__(self, status: JSON):
        super().__init__(str(status.get("message", "")))
        self.status = status

    @property
    def code(self) -> int:
        return int(self.status.get("code", 500))


class Expired(StorageError):
    """The requested resourceVersion is older than the cache's history."""


class StoreError(StorageError, RuntimeError):
    """ClickHouse could not do what was asked."""


class QueryError(StorageError, ValueError):
    """An analyst's query was refused or failed."""


class AnalyticsTimeout(QueryError):
    """An analytics query ran longer than it may."""


@dataclass(frozen=True)
class StoredObject:
    resource_version: int
    namespace: str
    name: str
    #: the object's JSON as stored
    raw: str | bytes


def json_bytes(raw: str | bytes) -> bytes:
    """An object's JSON as bytes, however the store returned it."""
    return raw.encode() if isinstance(raw, str) else raw
