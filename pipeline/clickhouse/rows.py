"""The ClickHouse rows of committed changes, encoded for inserting. Pure: no I/O.

Rows are JSON arrays, one per line (ClickHouse's ``JSONCompactEachRow``),
each made by one ``orjson.dumps`` call: ClickHouse parses them in C++, where
clickhouse-connect would build and convert its columns value by value in
Python (measured: most of the materializer's interpreter time).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import UTC, datetime
from typing import Any

import orjson

from pipeline.model import objects, resources
from pipeline.model.messages import Change

Row = list[Any]
#: how a row's input format is named to ClickHouse
FORMAT = "JSONCompactEachRow"

REPORT_COLUMNS = ("resource", "namespace", "name", "uid", "resource_version", "deleted",
                  "created", "committed", "labels", "scope_kind", "scope_name",
                  *objects.SUMMARY_FIELDS, "object")

RESULT_COLUMNS = ("cluster", "resource", "namespace", "report", "report_uid", "resource_version",
                  "idx", "committed", "resource_kind", "resource_namespace", "resource_name",
                  "resource_uid", "policy", "rule", "result", "severity", "category", "source",
                  "scored", "message", "properties", "result_time")

PROGRESS_COLUMNS = ("topic", "partition", "offset", "resource_version")


def parse_time(value: Any) -> datetime:
    if isinstance(value, str):
        try:
            return datetime.fromisoformat(value.replace("Z", "+00:00")).astimezone(UTC)
        except ValueError:
            pass
    return datetime.fromtimestamp(0, UTC)


def stamp(moment: datetime) -> str:
    """A ``DateTime64(3, 'UTC')`` value as ClickHouse reads it."""
    return moment.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]


def report_row(change: Change, committed: datetime, object_json: bytes | None = None
               ) -> Row | None:
    """One ``reports`` row for a committed change (None for a kind no table
    holds); ``object_json``, the object as the change log holds it, spares
    encoding it again. A deletion's row is a tombstone: its version hides the
    object's older rows, and its object is ``{}`` (the last state stays in the
    change log and the results history). Every short-lived EphemeralReport
    leaves one behind, so whole objects there would be most of the table,
    and every merge and read of it would carry them."""
    obj = change.obj
    meta = objects.metadata(obj)
    rtype = resources.by_kind(str(obj.get("apiVersion")), str(obj.get("kind")))
    if rtype is None:
        return None
    counts = objects.summary(rtype, obj)
    skind, sname = objects.scope(rtype, obj)
    labels = meta.get("labels") or {}
    return [rtype.id, meta.get("namespace") or "", meta.get("name") or "", meta.get("uid") or "",
            change.resource_version, 1 if change.type == "DELETED" else 0,
            stamp(parse_time(meta.get("creationTimestamp"))), stamp(committed),
            {str(k): str(v) for k, v in labels.items()}, skind, sname,
            *(counts[f] for f in objects.SUMMARY_FIELDS),
            "{}" if change.type == "DELETED" else (object_json or orjson.dumps(obj)).decode()]


def result_rows(change: Change, committed: datetime, cluster: str) -> list[Row]:
    """``results`` rows (one per result) of a committed change."""
    if change.type == "DELETED":
        return []
    obj = change.obj
    rtype = resources.by_kind(str(obj.get("apiVersion")), str(obj.get("kind")))
    if rtype is None:
        return []
    meta = objects.metadata(obj)
    namespace = meta.get("namespace") or ""
    name, uid = meta.get("name") or "", meta.get("uid") or ""
    scope_ref = objects.body(rtype, obj).get("owner" if rtype.body_path else "scope")
    scope_ref = scope_ref if isinstance(scope_ref, dict) else {}
    when = stamp(committed)
    rows = []
    for idx, r in enumerate(objects.results(rtype, obj)):
        refs = r.get("resources")
        ref = refs[0] if isinstance(refs, list) and refs and isinstance(refs[0], dict) \
            else scope_ref
        ts = r.get("timestamp")
        ts = ts if isinstance(ts, dict) else {}
        props = r.get("properties")
        props = props if isinstance(props, dict) else {}
        rows.append([
            cluster, rtype.id, namespace, name, uid, change.resource_version, idx, when,
            str(ref.get("kind") or ""), str(ref.get("namespace") or namespace),
            str(ref.get("name") or ""), str(ref.get("uid") or ""), str(r.get("policy") or ""),
            str(r.get("rule") or ""), str(r.get("result") or ""), str(r.get("severity") or ""),
            str(r.get("category") or ""), str(r.get("source") or ""),
            1 if r.get("scored") else 0, str(r.get("message") or ""),
            {str(k): str(v) for k, v in props.items()}, _seconds(ts.get("seconds"))])
    return rows


#: the last second a ``DateTime`` column holds
_LAST_SECOND = 2**32 - 1


def _seconds(value: Any) -> int:
    try:
        return min(max(int(value), 0), _LAST_SECOND)
    except (TypeError, ValueError):
        return 0


def encode(rows: Iterable[Row]) -> bytes:
    """Rows as ``JSONCompactEachRow``."""
    return b"\n".join(map(orjson.dumps, rows))


def encode_values(rows: Iterable[Sequence[Any]]) -> bytes:
    """Rows as ``JSONCompactEachRow``, their datetimes as ``DateTime64(3)``
    text (which a ``DateTime`` column reads too). For rows that would go
    through clickhouse-connect's ``insert``: its insert context refers to
    itself (a bound method of its own), so it and the rows it holds are
    freed only by a full collection of the garbage collector, which walks
    them until then (a second's trend rows, about 1,500 lists, every second)."""
    return b"\n".join(orjson.dumps(row, default=_datetime_text,
                                    option=orjson.OPT_PASSTHROUGH_DATETIME) for row in rows)


def _datetime_text(value: Any) -> str:
    if isinstance(value, datetime):
        return stamp(value)
    raise TypeError(f"{type(value).__name__} is not a ClickHouse row value")


def change_rows(changes: Sequence[Change], committed: datetime | Sequence[datetime], *,
                cluster: str, object_json: Sequence[bytes | None] | None = None
                ) -> tuple[bytes, bytes]:
    """The encoded ``reports`` and ``results`` rows of a batch of changes,
    committed at one time or each at its own."""
    raws = object_json or [None] * len(changes)
    times = [committed] * len(changes) if isinstance(committed, datetime) else committed
    reports = encode(row for c, raw, when in zip(changes, raws, times, strict=True)
                     if (row := report_row(c, when, raw)) is not None)
    results = encode(row for c, when in zip(changes, times, strict=True)
                     for row in result_rows(c, when, cluster))
    return reports, results
