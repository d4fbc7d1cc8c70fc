"""``reports-pipeline trends``: fail counts per namespace and policy over time,
printed as a table and optionally drawn as a chart (PNG or SVG).

The data comes from the ``policy_windows`` trend table, either straight from a
ClickHouse server (``CLICKHOUSE_URL``) or, when ClickHouse is embedded in a
running ``reports-pipeline up --data-dir DIR``, through that system's read-only
analytics endpoint (chDB allows one process per data directory).
"""

from __future__ import annotations

import asyncio
import base64
import re
import ssl
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, Protocol

import httpx
import yaml

from pipeline.settings import Settings
from pipeline.store import ReportStore

Rows = list[tuple[Any, ...]]
_DURATION = re.compile(r"^(\d+)([smhd])$")
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def parse_duration(text: str) -> int:
    m = _DURATION.match(text.strip())
    if not m:
        raise ValueError(f"{text!r} is not a duration like 30s, 5m, 1h or 7d")
    return int(m.group(1)) * _UNITS[m.group(2)]


class Analytics(Protocol):
    async def query(self, sql: str, parameters: dict[str, Any]) -> tuple[list[str], Rows]: ...


class ServerAnalytics:
    """A ClickHouse server, reached directly (read-only session)."""

    def __init__(self, settings: Settings):
        self._store = ReportStore(settings, threads=1)

    async def query(self, sql: str, parameters: dict[str, Any]) -> tuple[list[str], Rows]:
        try:
            return await self._store.analytics(sql, parameters)
        finally:
            await self._store.close()


class RunningSystem:
    """The analytics endpoint of a running ``up``, found through its kubeconfig."""

    def __init__(self, data_dir: Path):
        config_file = data_dir / "kubeconfig"
        if not config_file.exists():
            raise FileNotFoundError(f"{config_file} does not exist: is `reports-pipeline up"
                                    f" --data-dir {data_dir}` running?")
        config = yaml.safe_load(config_file.read_text())
        cluster = config["clusters"][0]["cluster"]
        self._server = cluster["server"]
        self._token = config["users"][0]["user"]["token"]
        self._ca = base64.b64decode(cluster["certificate-authority-data"]).decode()

    async def query(self, sql: str, parameters: dict[str, Any]) -> tuple[list[str], Rows]:
        context = ssl.create_default_context(cadata=self._ca)
        async with httpx.AsyncClient(base_url=self._server, verify=context, timeout=60,
                                     headers={"Authorization": f"Bearer {self._token}"}) as c:
            try:
                response = await c.post("/analytics/v1/query",
                                        json={"query": sql, "parameters": parameters})
            except httpx.ConnectError as err:
                raise ConnectionError(f"cannot reach the running system at {self._server}:"
                                      f" {err}") from err
        body = response.json()
        if response.status_code != 200:
            raise RuntimeError(body.get("message", response.text))
        return body["columns"], [tuple(r) for r in body["rows"]]


@dataclass(frozen=True)
class TrendQuery:
    cluster: str
    bucket: int  # seconds
    since: int  # seconds
    namespace: str | None = None
    policy: str | None = None

    def sql(self) -> tuple[str, dict[str, Any]]:
        where = ["cluster = {cluster:String}",
                 "window_start >= now() - toIntervalSecond({since:UInt32})"]
        params: dict[str, Any] = {"cluster": self.cluster, "since": self.since,
                                  "bucket": self.bucket}
        if self.namespace is not None:
            where.append("namespace = {namespace:String}")
            params["namespace"] = self.namespace
        if self.policy is not None:
            where.append("policy = {policy:String}")
            params["policy"] = self.policy
        sql = ("SELECT toStartOfInterval(window_start, toIntervalSecond({bucket:UInt32}))"
               " AS bucket, namespace, policy, argMax(fail, window_start) AS fail,"
               " sum(new_failures) AS new_failures, sum(resolved_failures) AS resolved"
               " FROM policy_windows FINAL WHERE " + " AND ".join(where) +
               " GROUP BY bucket, namespace, policy ORDER BY bucket, namespace, policy")
        return sql, params


def _time(value: Any) -> datetime:
    if isinstance(value, datetime):
        return value
    return datetime.fromisoformat(str(value).replace("Z", "+00:00"))


@dataclass(frozen=True)
class Point:
    bucket: datetime
    fail: int
    new_failures: int
    resolved: int


def series(rows: Rows) -> dict[tuple[str, str], list[Point]]:
    """(namespace, policy) -> points per bucket, carrying the fail count forward
    through buckets without activity."""
    buckets = sorted({_time(r[0]) for r in rows})
    raw: dict[tuple[str, str], dict[datetime, Point]] = {}
    for b, ns, policy, fail, new, resolved in rows:
        t = _time(b)
        raw.setdefault((ns, policy), {})[t] = Point(t, int(fail), int(new), int(resolved))
    out: dict[tuple[str, str], list[Point]] = {}
    for key, points in raw.items():
        filled, last = [], None
        for t in buckets:
            p = points.get(t)
            if p is None and last is not None:
                p = Point(t, last.fail, 0, 0)
            if p is not None:
                filled.append(p)
                last = p
        out[key] = filled
    return out


def render_table(data: dict[tuple[str, str], list[Point]]) -> str:
    header = ("TIME", "NAMESPACE", "POLICY", "FAIL", "NEW", "RESOLVED")
    lines: list[Sequence[str]] = [header]
    rows = sorted(((p.bucket, ns, policy, p) for (ns, policy), pts in data.items()
                   for p in pts), key=lambda r: (r[0], r[1], r[2]))
    for t, ns, policy, p in rows:
        lines.append((t.strftime("%Y-%m-%d %H:%M:%S"), ns or "(cluster)", policy, str(p.fail),
                      str(p.new_failures), str(p.resolved)))
    widths = [max(len(line[i]) for line in lines) for i in range(len(header))]
    return "\n".join("   ".join(c.ljust(w) for c, w in zip(line, widths, strict=True)).rstrip()
                     for line in lines)


def render_chart(data: dict[tuple[str, str], list[Point]], path: Path, *, top: int = 10) -> None:
    """A line chart of fail counts per namespace and policy (the ``top`` series
    with the most failures); PNG or SVG by the file's extension."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ranked = sorted(data.items(), key=lambda kv: -max((p.fail for p in kv[1]), default=0))
    fig, ax = plt.subplots(figsize=(10, 5))
    for (ns, policy), points in ranked[:top]:
        ax.plot([p.bucket for p in points], [p.fail for p in points], marker="o",  # type: ignore[arg-type]
                label=f"{ns or '(cluster)'} / {policy}")
    ax.set_title("Failing results per namespace and policy")
    ax.set_xlabel("time (UTC)")
    ax.set_ylabel("failing results")
    ax.grid(True, alpha=0.3)
    if ranked:
        ax.legend(fontsize="small", loc="upper left", bbox_to_anchor=(1.01, 1))
    fig.autofmt_xdate()
    fig.tight_layout()
    fig.savefig(path, format=path.suffix.lstrip(".").lower() or "png")
    plt.close(fig)


async def run_trends(source: Analytics, query: TrendQuery, *, chart: Path | None = None,
                     top: int = 10) -> str:
    sql, params = query.sql()
    _, rows = await source.query(sql, params)
    data = series(rows)
    if chart is not None:
        await asyncio.to_thread(render_chart, data, chart, top=top)
    if not data:
        return "no trend data in that range"
    return render_table(data)
