"""``reports-pipeline trends``: fail counts per namespace and policy over time,
printed as a table and optionally drawn as a chart (PNG or SVG).

The data comes from the ``policy_windows`` trend table, either straight from a
ClickHouse server (``CLICKHOUSE_URL``) or, when ClickHouse is embedded in a
running ``reports-pipeline up --data-dir DIR``, through that system's read-only
analytics endpoint (chDB allows one process per data directory).
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol

from apiserver.access.tls import ensure_token
from dashboard import charts, filters
from dashboard.filters import Filters, Span
from dashboard.pages import stamp
from dashboard.series import Series, build, ranked
from kubeclient import APIError, Client, ConfigError, ConnectionFailed, target
from pipeline.clickhouse.analytics import AnalyticsQueries
from pipeline.clickhouse.connection import Connection
from pipeline.settings import Settings

Rows = list[tuple[Any, ...]]
_DURATION = re.compile(r"^(\d+)([smhd])$")
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def parse_duration(text: str) -> int:
    m = _DURATION.match(text.strip())
    if not m:
        raise ValueError(f"{text!r} is not a duration like 30s, 5m, 1h or 7d")
    return int(m.group(1)) * _UNITS[m.group(2)]


class Analytics(Protocol):
    async def check(self) -> None:
        """Raise an error saying what to do unless the trend tables can be read."""

    async def query(self, sql: str, parameters: dict[str, Any]) -> tuple[list[str], Rows]: ...

    async def aclose(self) -> None: ...


class ServerAnalytics:
    """A ClickHouse server, reached directly (read-only session)."""

    def __init__(self, settings: Settings, threads: int = 1):
        self._clickhouse = Connection(settings, threads=threads)
        self._analytics = AnalyticsQueries(self._clickhouse)

    async def check(self) -> None:
        await self._analytics.check_analytics()

    async def query(self, sql: str, parameters: dict[str, Any]) -> tuple[list[str], Rows]:
        return await self._analytics.analytics(sql, parameters)

    async def aclose(self) -> None:
        await self._analytics.close()
        await self._clickhouse.close()


class RunningSystem:
    """The analytics endpoint of a running ``up``, reached with its kubeconfig."""

    def __init__(self, data_dir: Path):
        self._kubeconfig = data_dir / "kubeconfig"
        if not self._kubeconfig.exists():
            raise FileNotFoundError(f"{self._kubeconfig} does not exist: is `reports-pipeline up"
                                    f" --data-dir {data_dir}` running?")
        self._data_dir = data_dir
        self._client: Client | None = None

    @property
    def token(self) -> str:
        """`up`'s bearer token (the dashboard asks its users for it too)."""
        return ensure_token(self._data_dir / "tls")

    async def check(self) -> None:
        await self.query("SELECT 1 FROM policy_windows LIMIT 1", {})

    async def query(self, sql: str, parameters: dict[str, Any]) -> tuple[list[str], Rows]:
        try:
            if self._client is None:  # one connection for every query
                self._client = Client(await target(self._kubeconfig), timeout=60)
            body = await self._client.json("POST", "/analytics/v1/query",
                                           body={"query": sql, "parameters": parameters})
        except ConnectionFailed as err:
            raise ConnectionError(f"nothing answers at {err.server} ({err.detail}): is"
                                  f" `reports-pipeline up --data-dir {self._data_dir}`"
                                  " running?") from err
        except APIError as err:
            raise RuntimeError((err.details or {}).get("message") or err.reason) from err
        except ConfigError as err:
            raise RuntimeError(str(err)) from err
        return body["columns"], [tuple(r) for r in body["rows"]]

    async def aclose(self) -> None:
        if self._client is not None:
            await self._client.close()
            self._client = None


@dataclass(frozen=True)
class TrendQuery:
    cluster: str  # "": every cluster
    bucket: int  # seconds
    since: int  # seconds
    namespace: str | None = None
    policy: str | None = None
    #: "namespace": a series per namespace and policy; "cluster": per cluster
    #: and policy, over all its namespaces (a fleet's store)
    by: str = "namespace"

    def filters(self) -> Filters:
        return Filters(cluster=self.cluster, namespace=self.namespace or "",
                       policy=self.policy or "")

    def span(self, now: float | None = None) -> Span:
        """Whole buckets covering the last ``since`` seconds up to now."""
        return Span.last(self.since, self.bucket, now)


def render_table(span: Span, data: Sequence[Series], by: str = "namespace") -> str:
    """One line per series and bucket where its count changed or failures
    came or went (and its first bucket): the count carried through the rest."""
    header = ("TIME", by.upper(), "POLICY", "FAIL", "NEW", "RESOLVED")
    lines: list[Sequence[str]] = [header]
    rows = []
    for s in data:
        for i, b in enumerate(span.buckets()):
            moved = i == 0 or s.fail[i] != s.fail[i - 1] or s.new[i] or s.resolved[i]
            if moved and (s.fail[i] or s.new[i] or s.resolved[i] or i > 0):
                rows.append((b, s.key[0], s.key[1], s.fail[i], s.new[i], s.resolved[i]))
    for b, ns, policy, fail, new, resolved in sorted(rows):
        lines.append((stamp(b), ns or "(cluster)", policy, str(fail), str(new), str(resolved)))
    widths = [max(len(line[i]) for line in lines) for i in range(len(header))]
    return "\n".join("   ".join(c.ljust(w) for c, w in zip(line, widths, strict=True)).rstrip()
                     for line in lines)


def render_chart(span: Span, data: Sequence[Series], path: Path, *, top: int = 10,
                 rank: str = "count") -> None:
    """A line chart of the ``top`` series over the whole range; SVG drawn as the
    dashboard draws it, PNG with matplotlib, by the file's extension."""
    shown = ranked(data, top=top, by=rank)
    buckets = span.buckets()
    if path.suffix.lower() == ".svg":
        path.write_text(charts.line_chart(buckets, span.bucket, [(s.label, s.fail) for s in shown],
                                          title="failing results per namespace and policy"))
        return
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    fig, ax = plt.subplots(figsize=(10, 5))
    times = [datetime.fromtimestamp(b + span.bucket / 2, UTC) for b in buckets]
    for s in shown:
        ax.step(times, s.fail, where="mid", label=s.label)  # type: ignore[arg-type]
    ax.set_xlim(datetime.fromtimestamp(span.start, UTC),  # type: ignore[arg-type]
                datetime.fromtimestamp(span.end, UTC))  # type: ignore[arg-type]
    ax.yaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_ylim(bottom=0, top=max(1, *(max(s.fail) for s in shown)) * 1.1 if shown else 1)
    ax.set_title("Failing results per namespace and policy")
    ax.set_xlabel("time (UTC)")
    ax.set_ylabel("failing results")
    ax.grid(True, alpha=0.3)
    if shown:
        ax.legend(fontsize="small", loc="upper left", bbox_to_anchor=(1.01, 1))
    fig.autofmt_xdate()
    fig.tight_layout()
    fig.savefig(path, format="png")
    plt.close(fig)


async def fetch(source: Analytics, query: TrendQuery, now: float | None = None
                ) -> tuple[Span, list[Series]]:
    """Every series of the range, counts carried in from before it."""
    f, span = query.filters(), query.span(now)
    windows, carried_in = ((filters.cluster_windows, filters.cluster_carried_in)
                           if query.by == "cluster" else (filters.windows, filters.carried_in))
    try:
        (_, rows), (_, carried) = await asyncio.gather(
            source.query(*windows(f, span)), source.query(*carried_in(f, span)))
    finally:
        await source.aclose()
    return span, build(span.buckets(), rows, carried)


async def run_trends(source: Analytics, query: TrendQuery, *, chart: Path | None = None,
                     top: int = 10, rank: str = "count") -> str:
    try:
        await source.check()
    except BaseException:
        await source.aclose()
        raise
    span, data = await fetch(source, query)
    if chart is not None:
        await asyncio.to_thread(render_chart, span, data, chart, top=top, rank=rank)
    if not data:
        return "no trend data in that range"
    return render_table(span, data, query.by)
