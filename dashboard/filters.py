"""What a page shows, parsed from its URL (links can be shared), and the SQL
each view asks, parameter-bound. Pure."""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass, replace
from typing import Any
from urllib.parse import urlencode

#: the ranges a user picks from, and the bucket each gets unless told
RANGES = {"1h": 3600, "6h": 6 * 3600, "24h": 86400, "7d": 7 * 86400, "30d": 30 * 86400}
BUCKETS = {"1m": 60, "5m": 300, "15m": 900, "1h": 3600, "6h": 6 * 3600, "1d": 86400}
AUTO_BUCKET = {"1h": "1m", "6h": "5m", "24h": "15m", "7d": "6h", "30d": "1d"}
SEVERITIES = ("critical", "high", "medium", "low", "info")
RANKS = ("count", "change")
#: most buckets one chart draws (a range over a small bucket is refused)
MAX_BUCKETS = 1000


class FilterError(ValueError):
    """A filter in the URL that the dashboard cannot use."""


@dataclass(frozen=True)
class Filters:
    cluster: str = ""
    namespace: str = ""
    policy: str = ""
    severity: str = ""
    range: str = "24h"
    bucket: str = ""  # empty: the range's own
    top: int = 10
    rank: str = "count"
    min_score: float = 8.0
    sort: str = ""
    refresh: int = 30  # seconds between live refreshes; 0: none

    @classmethod
    def parse(cls, query: Mapping[str, str]) -> Filters:
        known = {k: v for k, v in query.items() if k in cls.__dataclass_fields__}
        text: dict[str, Any] = {k: v for k, v in known.items()
                                if k not in ("top", "min_score", "refresh")}
        f = cls(**text)
        try:
            f = replace(f, top=int(known.get("top", f.top)),
                        min_score=float(known.get("min_score", f.min_score)),
                        refresh=int(known.get("refresh", f.refresh)))
        except ValueError as err:
            raise FilterError(f"not a number: {err}") from err
        if f.range not in RANGES:
            raise FilterError(f"range must be one of {', '.join(RANGES)}")
        if f.bucket and f.bucket not in BUCKETS:
            raise FilterError(f"bucket must be one of {', '.join(BUCKETS)}")
        if f.severity and f.severity not in SEVERITIES:
            raise FilterError(f"severity must be one of {', '.join(SEVERITIES)}")
        if f.rank not in RANKS:
            raise FilterError(f"rank must be one of {', '.join(RANKS)}")
        if not 1 <= f.top <= 50:
            raise FilterError("top must be between 1 and 50")
        if not 0 <= f.refresh <= 3600:
            raise FilterError("refresh must be between 0 and 3600 seconds")
        if RANGES[f.range] // f.bucket_seconds > MAX_BUCKETS:
            raise FilterError(f"{f.range} in buckets of {f.bucket} is more than"
                              f" {MAX_BUCKETS} buckets: choose a larger bucket")
        return f

    @property
    def bucket_seconds(self) -> int:
        return BUCKETS[self.bucket or AUTO_BUCKET[self.range]]

    @property
    def range_seconds(self) -> int:
        return RANGES[self.range]

    def params(self, **changes: Any) -> dict[str, Any]:
        """This page's filters with ``changes``, defaults left out."""
        wanted = asdict(replace(self, **changes))
        defaults = asdict(Filters())
        return {k: v for k, v in wanted.items() if v != defaults[k]}

    def query_string(self, **changes: Any) -> str:
        return urlencode(self.params(**changes))


@dataclass(frozen=True)
class Span:
    """A time range cut into whole buckets (epoch seconds, end excluded)."""
    start: int
    end: int
    bucket: int

    @classmethod
    def last(cls, seconds: int, bucket: int, now: float | None = None) -> Span:
        """Whole buckets covering the last ``seconds`` up to now (at least one)."""
        end = (int(now if now is not None else time.time()) // bucket + 1) * bucket
        return cls(end - max(1, -(-seconds // bucket)) * bucket, end, bucket)

    @classmethod
    def of(cls, f: Filters, now: float | None = None) -> Span:
        return cls.last(f.range_seconds, f.bucket_seconds, now)

    def buckets(self) -> list[int]:
        return list(range(self.start, self.end, self.bucket))


Query = tuple[str, dict[str, Any]]


def _where(f: Filters, *, namespace: str = "namespace", policy: str = "policy",
           cluster: str | None = "cluster") -> tuple[str, dict[str, Any]]:
    parts, params = [], {}
    if cluster and f.cluster:
        parts.append(f"{cluster} = {{cluster:String}}")
        params["cluster"] = f.cluster
    if f.namespace:
        parts.append(f"{namespace} = {{namespace:String}}")
        params["namespace"] = f.namespace
    if f.policy:
        parts.append(f"{policy} = {{policy:String}}")
        params["policy"] = f.policy
    return "".join(f" AND {p}" for p in parts), params


def clusters() -> Query:
    return "SELECT DISTINCT cluster FROM policy_counts ORDER BY cluster", {}


def totals(f: Filters) -> Query:
    where, params = _where(f)
    return ("SELECT cluster, sum(pass), sum(fail), sum(warn), sum(error), sum(skip)"
            " FROM policy_counts FINAL WHERE 1" + where +
            " GROUP BY cluster ORDER BY cluster"), params


def failing_by(f: Filters, column: str) -> Query:
    """Failing results now per namespace or per policy, with the other counts."""
    assert column in ("namespace", "policy")
    where, params = _where(f)
    return (f"SELECT {column}, sum(fail) AS fail, sum(warn) AS warn, sum(error) AS error,"
            " sum(pass) AS pass, count() AS series"
            " FROM policy_counts FINAL WHERE 1" + where +
            f" GROUP BY {column} HAVING fail > 0 ORDER BY fail DESC, {column} LIMIT 1000"), params


def windows(f: Filters, span: Span) -> Query:
    """Per namespace, policy and bucket: the failing count at the bucket's last
    window, and the failures that appeared and went away in it."""
    where, params = _where(f)
    return ("SELECT namespace, policy,"
            " toUInt32(toStartOfInterval(window_start, toIntervalSecond({bucket:UInt32})))"
            " AS b, argMax(fail, window_start) AS fail, sum(new_failures) AS new,"
            " sum(resolved_failures) AS resolved"
            " FROM policy_windows FINAL"
            " WHERE window_start >= toDateTime({start:UInt32})"
            " AND window_start < toDateTime({end:UInt32})" + where +
            " GROUP BY namespace, policy, b ORDER BY b"), {
                **params, "bucket": span.bucket, "start": span.start, "end": span.end}


def cluster_windows(f: Filters, span: Span) -> Query:
    """Per cluster, policy and bucket: the policy's failing count over the
    whole cluster at the bucket's last window (``policy_totals_windows``);
    the rows of ``windows`` with the cluster for the namespace (no new and
    resolved counts there: 0)."""
    where, params = _where(replace(f, namespace=""))
    return ("SELECT cluster, policy,"
            " toUInt32(toStartOfInterval(window_start, toIntervalSecond({bucket:UInt32})))"
            " AS b, argMax(fail, window_start) AS fail, 0 AS new, 0 AS resolved"
            " FROM policy_totals_windows FINAL"
            " WHERE window_start >= toDateTime({start:UInt32})"
            " AND window_start < toDateTime({end:UInt32})" + where +
            " GROUP BY cluster, policy, b ORDER BY b"), {
                **params, "bucket": span.bucket, "start": span.start, "end": span.end}


def cluster_carried_in(f: Filters, span: Span) -> Query:
    """Each cluster's and policy's failing count when the range starts."""
    where, params = _where(replace(f, namespace=""))
    return ("SELECT cluster, policy, argMax(fail, window_start) AS fail"
            " FROM policy_totals_windows FINAL WHERE window_start < toDateTime({start:UInt32})"
            + where + " GROUP BY cluster, policy HAVING fail > 0"), {**params,
                                                                    "start": span.start}


def carried_in(f: Filters, span: Span) -> Query:
    """Each series' failing count when the range starts (its last window
    before), carried into the range."""
    where, params = _where(f)
    return ("SELECT namespace, policy, argMax(fail, window_start) AS fail"
            " FROM policy_windows FINAL WHERE window_start < toDateTime({start:UInt32})" + where +
            " GROUP BY namespace, policy HAVING fail > 0"), {**params, "start": span.start}


def _carried(f: Filters, span: Span, *, table: str = "policy_windows",
             keys: str = "namespace, policy", only: str = "") -> tuple[str, dict[str, Any]]:
    """Per series (``keys``) its failing count per bucket of ``span``
    (``vals``), carried forward through quiet buckets and in from its last
    window before the range: computed by ClickHouse, one array per series.
    ``only`` narrows the series (an SQL condition on the keys)."""
    where, params = _where(f) if "namespace" in keys else _where(replace(f, namespace=""))
    where += f" AND {only}" if only else ""
    per_bucket = (
        f"SELECT {keys},"
        " toUInt32(toStartOfInterval(window_start, toIntervalSecond({bucket:UInt32}))) AS b,"
        f" argMax(fail, window_start) AS fail FROM {table} FINAL"
        " WHERE window_start >= toDateTime({start:UInt32})"
        " AND window_start < toDateTime({end:UInt32})" + where +
        f" GROUP BY {keys}, b"
        f" UNION ALL SELECT {keys}, toUInt32({{start:UInt32}} - 1) AS b,"
        f" argMax(fail, window_start) AS fail FROM {table} FINAL"
        " WHERE window_start < toDateTime({start:UInt32})" + where +
        f" GROUP BY {keys}")
    sql = (f"SELECT {keys}, arrayMap(i -> if(i > 0, fs[i], 0), arrayMap("
           "g -> arrayLastIndex(x -> x <= g, bs), arrayMap(n -> {start:UInt32} + n *"
           " {bucket:UInt32}, range({count:UInt32})))) AS vals"
           " FROM (SELECT " + keys + ", arraySort(groupArray(b)) AS bs,"
           " arraySort((v, k) -> k, groupArray(fail), groupArray(b)) AS fs"
           f" FROM ({per_bucket}) GROUP BY {keys})")
    return sql, {**params, "bucket": span.bucket, "start": span.start, "end": span.end,
                 "count": len(span.buckets())}


def _ranked(f: Filters) -> str:
    """The ``top`` series (namespace, policy) by their count at the end of the
    range, or (``rank=change``) by how far it moved over the range, from plain
    aggregates; those failing or changing in the range only."""
    where, _ = _where(f)
    last = "argMax(fail, window_start)"
    first = ("argMaxIf(fail, window_start, window_start < toDateTime({start:UInt32} +"
             " {bucket:UInt32}))")
    peak = "maxIf(fail, window_start >= toDateTime({start:UInt32}))"
    order = (f"abs({last} - {first}) DESC, {last} DESC" if f.rank == "change"
             else f"{last} DESC, {peak} DESC")
    return ("(namespace, policy) IN (SELECT namespace, policy FROM policy_windows FINAL"
            " WHERE window_start < toDateTime({end:UInt32})" + where +
            f" GROUP BY namespace, policy HAVING {last} > 0 OR {peak} > 0 OR {first} > 0"
            f" ORDER BY {order}, namespace, policy LIMIT {{top:UInt32}})")


def top_series(f: Filters, span: Span) -> Query:
    """The ``top`` series with the highest count at the end of the range, or
    (``rank=change``) those whose count moved most over it: (namespace,
    policy, counts per bucket)."""
    inner, params = _carried(f, span, only=_ranked(f))
    order = ("abs(vals[-1] - vals[1]) DESC, vals[-1] DESC" if f.rank == "change"
             else "vals[-1] DESC, arrayMax(vals) DESC")
    return (f"SELECT namespace, policy, vals FROM ({inner})"
            f" ORDER BY {order}, namespace, policy"), {**params, "top": f.top}


def series_count(f: Filters, span: Span) -> Query:
    """How many series (namespace, policy) were failing in the range or came
    into it failing."""
    where, params = _where(f)
    return ("SELECT count() FROM (SELECT namespace, policy FROM policy_windows FINAL"
            " WHERE window_start < toDateTime({end:UInt32})" + where +
            " GROUP BY namespace, policy HAVING argMax(fail, window_start) > 0"
            " OR maxIf(fail, window_start >= toDateTime({start:UInt32})) > 0)"), {
                **params, "start": span.start, "end": span.end}


def total_series(f: Filters, span: Span) -> Query:
    """Failing results of every series together per bucket. Without a
    namespace, from the cluster-wide totals per policy the pipeline keeps (a
    series per policy instead of one per namespace and policy)."""
    if f.namespace:
        inner, params = _carried(f, span, keys="cluster, namespace, policy")
    else:
        inner, params = _carried(f, span, table="policy_totals_windows", keys="cluster, policy")
    return f"SELECT sumForEach(vals) FROM ({inner})", params


def cluster_totals(f: Filters) -> Query:
    """Per cluster: its failing, warn, error and passing results now, and how
    many policies fail there (the namespace and policy filters apply)."""
    where, params = _where(replace(f, cluster=""))
    return ("SELECT cluster, sum(fail) AS failing, sum(warn) AS warning, sum(error) AS errors,"
            " sum(pass) AS passing, uniqExactIf(policy, fail > 0) AS policies"
            " FROM policy_counts FINAL WHERE 1" + where +
            " GROUP BY cluster ORDER BY failing DESC, cluster"), params


def cluster_trends(f: Filters, span: Span) -> Query:
    """Per cluster, its failing results per bucket (every policy's cluster-wide
    count, carried forward, summed)."""
    inner, params = _carried(replace(f, cluster="", namespace=""), span,
                             table="policy_totals_windows", keys="cluster, policy")
    return (f"SELECT cluster, sumForEach(vals) FROM ({inner}) GROUP BY cluster"
            " ORDER BY cluster"), params


def where_policies_fail(f: Filters) -> Query:
    """For the ``top`` policies failing most across the clusters: each cluster
    where it fails, with its count, the clusters where it fails most first."""
    where, params = _where(replace(f, cluster=""))
    per = ("SELECT policy, cluster, sum(fail) AS fail FROM policy_counts FINAL"
           " WHERE 1" + where + " GROUP BY policy, cluster HAVING fail > 0")
    return ("SELECT p.policy, p.cluster, p.fail, t.total FROM (" + per + ") AS p"
            " INNER JOIN (SELECT policy, sum(fail) AS total FROM (" + per + ")"
            " GROUP BY policy ORDER BY total DESC, policy LIMIT {top:UInt32}) AS t"
            " ON t.policy = p.policy ORDER BY t.total DESC, p.policy, p.fail DESC, p.cluster"),\
        {**params, "top": f.top}


def sources() -> Query:
    """The clusters a fleet follows (none in one cluster's store): its state,
    shown as unreachable when the fleet has not recorded it lately, and the
    commit time of its newest change the store holds."""
    return ("SELECT s.cluster, if(s.state = 'following' AND s.last_contact <"
            " now64(3) - INTERVAL 30 SECOND, 'unreachable', s.state) AS state,"
            " toUInt32(toDateTime(s.last_contact)) AS contact,"
            " toUInt32(toDateTime(p.last_change)) AS last_change"
            " FROM (SELECT * FROM fleet_sources FINAL) AS s"
            " LEFT JOIN (SELECT cluster, max(last_change) AS last_change"
            " FROM fleet_progress FINAL WHERE topic LIKE '%.changes' GROUP BY cluster) AS p"
            " ON p.cluster = s.cluster ORDER BY s.cluster"), {}


def flows(f: Filters, span: Span) -> Query:
    """New and resolved failures per bucket (buckets without any left out)."""
    where, params = _where(f)
    return ("SELECT toUInt32(toStartOfInterval(window_start, toIntervalSecond({bucket:UInt32})))"
            " AS b, sum(new_failures), sum(resolved_failures) FROM policy_windows FINAL"
            " WHERE window_start >= toDateTime({start:UInt32})"
            " AND window_start < toDateTime({end:UInt32})" + where +
            " GROUP BY b ORDER BY b"), {**params, "bucket": span.bucket, "start": span.start,
                                         "end": span.end}


def _severities(f: Filters) -> list[str]:
    return [f.severity] if f.severity else ["high", "critical"]


@dataclass(frozen=True)
class Current:
    """Where a store keeps its current reports: a cluster's in ``reports``,
    a fleet's in ``fleet_reports`` with the cluster in every row."""
    table: str
    cluster: str | None  # its cluster column; None: the store is one cluster's


ONE_CLUSTER = Current("reports", None)
FLEET = Current("fleet_reports", "cluster")


def is_fleet() -> Query:
    """Whether the store is a fleet's: it has followed a cluster."""
    return "SELECT count() > 0 FROM fleet_sources", {}


def top_resources(f: Filters, current: Current = ONE_CLUSTER) -> Query:
    """The resources with the most failing results now; in a fleet, a
    resource named alike in several clusters is one row, with its clusters."""
    where, params = _where(f, namespace="ns", cluster=current.cluster)
    clusters = (f", arrayStringConcat(arraySort(groupUniqArray({current.cluster})), ', ')"
                " AS clusters" if current.cluster else "")
    return ("SELECT kind, ns, resource_name, count() AS failures,"
            " arrayStringConcat(arraySort(groupUniqArray(policy)), ', ') AS policies" + clusters +
            f" FROM {current.table} FINAL ARRAY JOIN failing_severity AS severity,"
            " failing_resource_kind AS kind, failing_resource_namespace AS ns,"
            " failing_resource_name AS resource_name, failing_policy AS policy"
            " WHERE NOT deleted AND severity IN {severities:Array(String)}"
            + where +
            " GROUP BY kind, ns, resource_name"
            " ORDER BY failures DESC, ns, resource_name LIMIT {top:UInt32}"), {
                **params, "severities": _severities(f), "top": f.top}


@dataclass(frozen=True)
class Resource:
    kind: str
    namespace: str
    name: str


def resource_results(f: Filters, r: Resource, current: Current = ONE_CLUSTER) -> Query:
    where, params = _where(f, namespace="ns", cluster=current.cluster)
    cluster = f"{current.cluster}, " if current.cluster else ""
    return (f"SELECT {cluster}policy, rule, status, severity, name AS report"
            f" FROM {current.table} FINAL ARRAY JOIN result_status AS status,"
            " result_severity AS severity, result_resource_kind AS kind,"
            " result_resource_namespace AS ns, result_resource_name AS resource_name,"
            " result_policy AS policy, result_rule AS rule"
            " WHERE NOT deleted AND kind = {kind:String} AND ns = {rns:String}"
            " AND resource_name = {rname:String}" + where +
            f" ORDER BY status = 'fail' DESC, {cluster}policy, rule, report LIMIT 1000"), {
                **params, "kind": r.kind, "rns": r.namespace, "rname": r.name}


def resource_history(f: Filters, r: Resource, span: Span) -> Query:
    """Every stored result of the resource in the range (and the one before
    it), in time order per policy and rule: where its status changed."""
    where, params = _where(replace(f, namespace=""))
    return ("SELECT toUInt32(toDateTime(committed)) AS at, policy, rule, report, result"
            " FROM results WHERE resource_kind = {kind:String}"
            " AND resource_namespace = {rns:String} AND resource_name = {rname:String}"
            " AND committed < toDateTime({end:UInt32})" + where +
            " ORDER BY policy, rule, report, committed, resource_version LIMIT 20000"), {
                **params, "kind": r.kind, "rns": r.namespace, "rname": r.name,
                "end": span.end}


def findings(f: Filters, current: Current = ONE_CLUSTER) -> Query:
    where, params = _where(f, cluster=current.cluster)
    cluster = f"{current.cluster}, " if current.cluster else ""
    return (f"SELECT {cluster}namespace, name AS report, policy, rule, resource_kind,"
            f" resource_name, score FROM {current.table} FINAL"
            " ARRAY JOIN scored_policy AS policy,"
            " scored_rule AS rule, scored_resource_kind AS resource_kind,"
            " scored_resource_name AS resource_name, scored_score AS score"
            " WHERE NOT deleted AND score >= {min_score:Float64}" + where +
            f" ORDER BY score DESC, {cluster}namespace, report, rule LIMIT 500"), {
                **params, "min_score": f.min_score}


def names(column: str) -> Query:
    """The namespaces or policies the filters offer."""
    assert column in ("namespace", "policy")
    return (f"SELECT DISTINCT {column} FROM policy_counts ORDER BY {column} LIMIT 2000", {})
