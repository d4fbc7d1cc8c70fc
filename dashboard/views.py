"""Each page's content: the queries it asks (concurrently) and the HTML it
makes of their answers."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import replace
from html import escape
from typing import Any, Protocol
from urllib.parse import urlencode

from dashboard import charts, filters, series
from dashboard.filters import Filters, Query, Resource, Span
from dashboard.pages import Choices, Column, stamp, table

Rows = list[tuple[Any, ...]]
STATUSES = ("pass", "fail", "warn", "error", "skip")


class Source(Protocol):
    """Read-only, parameter-bound SQL (the analytics endpoint's guard)."""

    async def query(self, sql: str, parameters: dict[str, Any]) -> tuple[list[str], Rows]: ...


async def _ask(source: Source, *queries: Query) -> list[Rows]:
    answers = await asyncio.gather(*(source.query(sql, params) for sql, params in queries))
    return [rows for _, rows in answers]


async def choices(source: Source) -> Choices:
    clusters, namespaces, policies = await _ask(
        source, filters.clusters(), filters.names("namespace"), filters.names("policy"))
    return Choices([r[0] for r in clusters], [r[0] for r in namespaces],
                   [r[0] for r in policies])


async def _total(source: Source, f: Filters, span: Span) -> list[int]:
    """Failing results of every series per bucket."""
    [rows] = await _ask(source, filters.total_series(f, span))
    totals = rows[0][0] if rows else []
    return [int(v) for v in totals] or [0] * len(span.buckets())


def _link(path: str, f: Filters, **changes: Any) -> str:
    return f"{path}?{f.query_string(sort='', **changes)}"


async def overview(source: Source, f: Filters, now: float | None = None) -> str:
    span = Span.of(f, now)
    (totals, by_ns, by_policy), failing = await asyncio.gather(
        _ask(source, filters.totals(f), filters.failing_by(f, "namespace"),
             filters.failing_by(f, "policy")),
        _total(source, f, span))
    cards = []
    for cluster, *counts in totals:
        cells = "".join(f'<div class="card {s}"><div class="v" data-status="{s}">{int(n)}</div>'
                        f"{s}</div>" for s, n in zip(STATUSES, counts, strict=True))
        cards.append(f'<section class="cluster" data-cluster="{escape(cluster)}">'
                     f"<h2>{escape(cluster)}: results now</h2><div class=cards>{cells}</div>"
                     "</section>")
    if not cards:
        cards.append('<section><h2>Results now</h2><p class="muted">no reports yet</p></section>')
    spark = (f'<section><h2>Failing results, last {f.range}</h2>'
             f'<div class="row">{charts.sparkline(failing)}'
             f'<span data-sparkline-last="{failing[-1] if failing else 0}">now'
             f' {failing[-1] if failing else 0}, highest {max(failing, default=0)}</span>'
             "</div></section>")
    columns = [Column("fail", "failing", True), Column("warn", "warn", True),
               Column("error", "error", True), Column("pass", "pass", True)]
    ns_table = table("by-namespace", "overview", f, [
        Column("namespace", "namespace"), *columns, Column("series", "policies", True)], by_ns,
        links={0: lambda r: _link("/trends", f, namespace=r[0])})
    policy_table = table("by-policy", "overview", f, [
        Column("policy", "policy"), *columns, Column("series", "namespaces", True)], by_policy,
        links={0: lambda r: _link("/trends", f, policy=r[0])})
    return ("".join(cards) + spark +
            f'<div class="row"><section><h2>Failing by namespace</h2>{ns_table}</section>'
            f"<section><h2>Failing by policy</h2>{policy_table}</section></div>")


async def trends(source: Source, f: Filters, now: float | None = None) -> str:
    span = Span.of(f, now)
    buckets = span.buckets()
    top, flow, [(count,)] = await _ask(source, filters.top_series(f, span),
                                       filters.flows(f, span), filters.series_count(f, span))
    shown = [series.Series((ns, policy), [int(v) for v in vals], [], [])
             for ns, policy, vals in top]
    chart = charts.line_chart(buckets, span.bucket, [(s.label, s.fail) for s in shown],
                              title="failing results per namespace and policy")
    legend = "".join(f'<li><span style="background:{charts.color(i)}"></span>'
                     f"{escape(s.label)} <b>{s.last}</b> ({s.change:+d})</li>"
                     for i, s in enumerate(shown))
    per_bucket = {int(b): (int(n), int(g)) for b, n, g in flow}
    new = [per_bucket.get(b, (0, 0))[0] for b in buckets]
    gone = [per_bucket.get(b, (0, 0))[1] for b in buckets]
    flow_rows = [(stamp(b), n, g) for b, n, g in zip(buckets, new, gone, strict=True) if n or g]
    flow_table = table("flows", "trends", f, [Column("bucket", "bucket"),
                                              Column("new", "new failures", True),
                                              Column("resolved", "resolved", True)],
                       flow_rows[::-1], sortable=False)
    ranking = "highest count now" if f.rank == "count" else "largest change over the range"
    return (f'<section><h2>Failing results: top {f.top} by {ranking}, last {f.range} in'
            f' buckets of {_bucket_name(span.bucket)}</h2>{chart}'
            f'<ul class="legend">{legend}</ul>'
            f'<p class="muted">{count} series in the range; a quiet series keeps'
            " its last count.</p></section>"
            f"<section><h2>New and resolved failures per bucket</h2>"
            f"{charts.flow_bars(buckets, span.bucket, new, gone)}{flow_table}</section>")


def _bucket_name(seconds: int) -> str:
    return next(k for k, v in filters.BUCKETS.items() if v == seconds)


def _resource_link(f: Filters, r: Sequence[Any]) -> str:
    return "/resources?" + urlencode({**f.params(sort=""), "kind": r[0], "rns": r[1],
                                      "rname": r[2]})


async def _current(source: Source) -> filters.Current:
    """Where the store keeps its current reports: a fleet's store is read as
    a cluster's is, with its clusters."""
    [[(fleet,)]] = await _ask(source, filters.is_fleet())
    return filters.FLEET if fleet else filters.ONE_CLUSTER


def _cluster_column(current: filters.Current) -> list[Column]:
    return [Column("cluster", "cluster")] if current.cluster else []


async def resources(source: Source, f: Filters, target: Resource | None,
                    now: float | None = None) -> str:
    current = await _current(source)
    if target is None:
        [rows] = await _ask(source, filters.top_resources(f, current))
        severities = f.severity or "high or critical"
        clusters = [Column("clusters", "clusters")] if current.cluster else []
        t = table("top-resources", "resources", f, [
            Column("kind", "kind"), Column("ns", "namespace"), Column("name", "name"),
            Column("failures", f"{severities} failures", True), Column("policies", "policies"),
            *clusters], rows, links={2: lambda r: _resource_link(f, r)})
        return (f"<section><h2>Resources with the most {escape(severities)} failures now"
                f"</h2>{t}</section>")
    span = Span.of(f, now)
    results, history = await _ask(source, filters.resource_results(f, target, current),
                                  filters.resource_history(f, target, span))
    changes = series.changes(history, since=span.start)
    results_table = table("resource-results", "resources", f, [
        *_cluster_column(current), Column("policy", "policy"), Column("rule", "rule"),
        Column("status", "result"), Column("severity", "severity"),
        Column("report", "report")], results)
    change_table = table("resource-history", "resources", f, [
        Column("at", "when"), Column("policy", "policy"), Column("rule", "rule"),
        Column("report", "report"), Column("before", "from"), Column("after", "to")],
        [(stamp(c.at), c.policy, c.rule, c.report, c.before or "(new)", c.after)
         for c in changes],
        sortable=False)
    title = f"{target.kind} {target.namespace + '/' if target.namespace else ''}{target.name}"
    return (f'<section><h2>{escape(title)}: results now</h2>{results_table}</section>'
            f"<section><h2>Changes of status, last {f.range}</h2>{change_table}</section>"
            f'<p><a href="{escape(_link("/resources", replace(f)))}">all resources</a></p>')


async def findings(source: Source, f: Filters) -> str:
    current = await _current(source)
    [rows] = await _ask(source, filters.findings(f, current))
    t = table("findings", "findings", f, [
        *_cluster_column(current), Column("namespace", "namespace"),
        Column("report", "report"), Column("policy", "policy"), Column("rule", "rule"),
        Column("kind", "kind"), Column("resource", "resource"),
        Column("score", "score", True)], rows)
    return (f"<section><h2>Results with a score of at least {f.min_score:g}"
            f" ({len(rows)}{'+' if len(rows) >= 500 else ''})</h2>{t}</section>")


async def fleet(source: Source, f: Filters, now: float | None = None) -> str:
    """Every cluster at once: its state and failing results now, the
    fleet's trend (a line per cluster), and where the policies failing most
    across the fleet fail."""
    span = Span.of(f, now)
    states, totals, trend, where = await _ask(
        source, filters.sources(), filters.cluster_totals(f), filters.cluster_trends(f, span),
        filters.where_policies_fail(f))
    state = {r[0]: (r[1], int(r[3])) for r in states}
    clusters = table("fleet-clusters", "fleet", f, [
        Column("cluster", "cluster"), Column("state", "state"),
        Column("last_change", "newest change"), Column("fail", "failing", True),
        Column("warn", "warn", True), Column("error", "error", True),
        Column("pass", "pass", True), Column("policies", "failing policies", True)],
        [(c, state.get(c, ("", 0))[0] or "-",
          stamp(state[c][1]) if state.get(c, ("", 0))[1] else "-", *counts)
         for c, *counts in totals],
        links={0: lambda r: _link("/", f, cluster=r[0])})
    stale = [c for c, (s, _) in state.items() if s != "following"]
    warning = (f'<p class="error-box" data-stale="{escape(",".join(stale))}">Not up to date:'
               f" {escape(', '.join(f'{c} ({state[c][0]})' for c in stale))}</p>"
               if stale else "")
    lines = [(str(c), [int(v) for v in vals]) for c, vals in trend]
    fleet_total = [sum(vs) for vs in zip(*(v for _, v in lines), strict=True)] if lines \
        else [0] * len(span.buckets())
    chart = charts.line_chart(span.buckets(), span.bucket,
                              [("fleet", fleet_total), *lines],
                              title="failing results per cluster")
    policies = table("where-policies-fail", "fleet", f, [
        Column("policy", "policy"), Column("cluster", "cluster"),
        Column("fail", "failing there", True), Column("total", "failing in the fleet", True)],
        where, links={1: lambda r: _link("/", f, cluster=r[1], policy=r[0])}, sortable=False)
    return (f"{warning}<section><h2>Clusters now</h2>{clusters}</section>"
            f'<section><h2>Failing results, last {f.range}: the fleet and each cluster</h2>'
            f'{chart}<span data-fleet-last="{fleet_total[-1] if fleet_total else 0}">now'
            f" {fleet_total[-1] if fleet_total else 0}</span></section>"
            f"<section><h2>Where the {f.top} policies failing most fail</h2>{policies}"
            "</section>")
