"""A fleet source's records as the fleet store's rows. Pure: no I/O.

From ``<prefix>.changes``: each committed change's ``fleet_reports`` row (the
report as it is in that cluster) and its ``results`` rows (the history).
From ``<prefix>.summaries``: the counts of each record's kind
(``policy_counts``, ``policy_windows``, ``policy_totals_windows``). Every row
carries the source's name as its cluster, whatever the record says, and a
version (the change's resourceVersion): a batch taken twice after a crash
collapses into the same rows.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import orjson

from pipeline.clickhouse import rows
from pipeline.model.messages import Change, DecodeError
from pipeline.model.objects import SUMMARY_FIELDS

FLEET_REPORT_COLUMNS = ("cluster", *rows.REPORT_COLUMNS)
POLICY_COUNT_COLUMNS = ("cluster", "namespace", "policy", *SUMMARY_FIELDS,
                        "resource_version", "updated")
POLICY_WINDOW_COLUMNS = ("cluster", "namespace", "policy", "window_start", "window_end",
                         "results_written", "new_failures", "resolved_failures",
                         *SUMMARY_FIELDS, "resource_version", "updated")
POLICY_TOTAL_COLUMNS = ("cluster", "policy", "window_start", "window_end", *SUMMARY_FIELDS,
                        "resource_version", "updated")


@dataclass
class Batch:
    """The rows of one batch of a source's records, and what it skipped."""
    reports: list[rows.Row] = field(default_factory=list)
    results: list[rows.Row] = field(default_factory=list)
    counts: list[rows.Row] = field(default_factory=list)
    windows: list[rows.Row] = field(default_factory=list)
    totals: list[rows.Row] = field(default_factory=list)
    #: records that are not what their topic holds (counted, not written)
    undecodable: int = 0
    #: the commit time of the newest change (None: no change in the batch)
    last_change: datetime | None = None
    #: where the batch ends in each (cluster, topic, partition) it took from:
    #: the offset of its last record, and that record's time
    positions: dict[tuple[str, str, int], tuple[int, datetime]] = field(default_factory=dict)

    def __len__(self) -> int:
        return (len(self.reports) + len(self.results) + len(self.counts) + len(self.windows)
                + len(self.totals))

    def add(self, other: Batch) -> None:
        """Take ``other``'s rows and positions (it ends later where both took)."""
        self.reports += other.reports
        self.results += other.results
        self.counts += other.counts
        self.windows += other.windows
        self.totals += other.totals
        self.undecodable += other.undecodable
        self.positions.update(other.positions)
        if other.last_change is not None and (self.last_change is None
                                              or other.last_change > self.last_change):
            self.last_change = other.last_change


def changes(cluster: str, records: Sequence[Any], batch: Batch) -> Batch:
    """Add the rows of change-log records (aiokafka's ``ConsumerRecord``)."""
    for record in records:
        try:
            change = Change.decode(record.value)
        except DecodeError:
            batch.undecodable += 1
            continue
        committed = datetime.fromtimestamp(record.timestamp / 1000, UTC)
        row = rows.report_row(change, committed, Change.object_json(record.value))
        if row is not None:
            batch.reports.append([cluster, *row])
        batch.results.extend(rows.result_rows(change, committed, cluster))
        batch.last_change = committed
    return batch


def listed(cluster: str, objects: Sequence[dict[str, Any]], listed_at: datetime,
           batch: Batch) -> Batch:
    """Add the rows of objects a resync listed from the cluster's API, each at
    its own resourceVersion."""
    for obj in objects:
        try:
            version = int(obj["metadata"]["resourceVersion"])
        except (KeyError, TypeError, ValueError):
            batch.undecodable += 1
            continue
        change = Change("ADDED", obj, version)
        row = rows.report_row(change, listed_at)
        if row is not None:
            batch.reports.append([cluster, *row])
        batch.results.extend(rows.result_rows(change, listed_at, cluster))
    return batch


def summaries(cluster: str, records: Sequence[Any], batch: Batch) -> Batch:
    """Add the rows of summaries records."""
    for record in records:
        try:
            value = orjson.loads(record.value)
            kind = value["kind"]
            counts = [int(value["counts"][f]) for f in SUMMARY_FIELDS]
            version = int(value["resourceVersion"])
            updated = rows.parse_time(value.get("time"))
            if kind == "current":
                batch.counts.append([cluster, str(value["namespace"]), str(value["policy"]),
                                     *counts, version, updated])
            elif kind == "window":
                batch.windows.append([
                    cluster, str(value["namespace"]), str(value["policy"]),
                    *_window(value), int(value["resultsWritten"]), int(value["newFailures"]),
                    int(value["resolvedFailures"]), *counts, version, updated])
            elif kind == "totals":
                batch.totals.append([cluster, str(value["policy"]), *_window(value), *counts,
                                     version, updated])
            else:
                batch.undecodable += 1
        except (orjson.JSONDecodeError, KeyError, TypeError, ValueError):
            batch.undecodable += 1
    return batch


def _window(value: dict[str, Any]) -> tuple[datetime, datetime]:
    window = value["window"]
    return rows.parse_time(window["start"]), rows.parse_time(window["end"])
