"""resourceVersions: the one of an empty store, the current version of an
object as the committer knows it, and how far ClickHouse's copy of the change
log has come. Pure data."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import orjson

#: The resourceVersion of a store that has never been written, as etcd's first
#: revision is 1: every list and watch has a real one, never "0" (client-go's
#: RetryWatcher, which Kyverno's report counters use, refuses "0"). The first
#: change is one more.
EMPTY_RESOURCE_VERSION = 1


@dataclass(frozen=True)
class Progress:
    """Where ClickHouse's copy of the change log stands: the next offset to
    read and the last resourceVersion written."""

    offset: int
    resource_version: int


@dataclass(frozen=True)
class Current:
    """What the committer knows of one key: the last committed change, its
    object as JSON. Thousands are kept: a parsed report is some four hundred
    objects of the interpreter's, and tens of thousands of them (a
    materializer far behind) took gigabytes it could not give back."""

    resource_version: int
    raw: bytes | str
    deleted: bool
    request_id: str = ""

    @property
    def obj(self) -> dict[str, Any]:
        """The object, parsed anew on each call."""
        value: dict[str, Any] = orjson.loads(self.raw)
        return value
