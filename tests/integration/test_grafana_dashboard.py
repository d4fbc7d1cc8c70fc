"""deploy/grafana's dashboard: every query (panels and variables), with the
ClickHouse data source plugin's macros and Grafana's variables expanded as
they would be, runs on ClickHouse over a generated month of reports and gets
rows; read through the analytics guard (read-only, bounded)."""

from __future__ import annotations

import json
import re
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from bench.versuspostgres import generate, load
from pipeline.clickhouse.analytics import AnalyticsQueries
from pipeline.clickhouse.connection import Connection
from pipeline.settings import Settings

pytestmark = pytest.mark.integration
DASHBOARD = Path(__file__).resolve().parents[2] / "deploy" / "grafana" / "policy-reports.json"
ALL = "$__all"


def expand(sql: str, variables: dict[str, list[str] | str], *, start: int, end: int,
           interval: int) -> str:
    """As the plugin expands a query: ``$__conditionalAll`` on the raw query
    (it reads the variable's name there), Grafana's interpolation of the
    variables, then the time macros."""
    sql = _conditional_all(sql, variables)

    def variable(m: re.Match[str]) -> str:
        name, fmt = m["name"] or m["bare"], m["fmt"]
        value = variables[name]
        values = value if isinstance(value, list) else [value]
        if fmt == "singlequote":
            return ",".join("'" + v.replace("'", "\\'") + "'" for v in values)
        return ",".join(values)
    sql = re.sub(r"\$\{(?P<name>\w+)(?::(?P<fmt>\w+))?\}|\$(?P<bare>(?!__)\w+)", variable, sql)

    sql = re.sub(r"\$__timeFilter\((\w+)\)",
                 rf"\1 >= toDateTime({start}) AND \1 <= toDateTime({end})", sql)
    sql = re.sub(r"\$__timeInterval\((\w+)\)",
                 rf"toStartOfInterval(toDateTime(\1), INTERVAL {interval} second)", sql)
    sql = sql.replace("$__fromTime", f"toDateTime({start})")
    sql = sql.replace("$__toTime", f"toDateTime({end})")
    assert "$" not in sql, sql
    return sql


def _conditional_all(sql: str, variables: dict[str, list[str] | str]) -> str:
    """``$__conditionalAll(condition, $var)``: ``1=1`` when the variable is
    All, the condition otherwise (arguments split at the last comma outside
    parentheses and quotes)."""
    macro = "$__conditionalAll("
    while (at := sql.find(macro)) >= 0:
        depth, quoted, split, i = 1, False, -1, at + len(macro)
        while depth:
            c = sql[i]
            if c == "'":
                quoted = not quoted
            elif not quoted and c == "(":
                depth += 1
            elif not quoted and c == ")":
                depth -= 1
            elif not quoted and c == "," and depth == 1:
                split = i
            i += 1
        condition, arg = sql[at + len(macro):split], sql[split + 1:i - 1].strip()
        value = variables[arg.lstrip("$").strip("{}")]
        sql = sql[:at] + ("1=1" if ALL in value else condition) + sql[i:]
    return sql


def queries(dashboard: dict[str, Any]) -> dict[str, str]:
    out = {p["title"]: t["rawSql"] for p in dashboard["panels"] for t in p["targets"]}
    out.update({f"variable {v['name']}": v["query"] for v in dashboard["templating"]["list"]
                if v["type"] == "query"})
    return out


def test_the_dashboard_is_for_the_clickhouse_plugin() -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    assert dashboard["uid"] and dashboard["panels"]
    for p in dashboard["panels"]:
        assert p["datasource"]["type"] == "grafana-clickhouse-datasource", p["title"]
        for t in p["targets"]:
            assert t["editorType"] == "sql" and t["rawSql"].lstrip().startswith("SELECT")


async def test_every_query_gets_rows(tmp_path: Path) -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    clickhouse = Connection(Settings.from_env({}, database=f"grafana_{uuid.uuid4().hex[:8]}"),
                            data_dir=tmp_path)
    await clickhouse.start()
    analytics = AnalyticsQueries(clickhouse)
    try:
        now = datetime.now(UTC)
        data = list(generate(1500, seed=5, now=now))
        await load(clickhouse, data, "default")
        resource = data[0][0]["scope"]["name"]
        end = int(time.time())
        start = end - 31 * 86400
        everything: dict[str, list[str] | str] = {
            "cluster": [ALL], "namespace": [ALL], "policy": [ALL],
            "severity": ["critical", "high"], "top": "10", "min_score": "8.0",
            "resource": resource}
        narrowed = {**everything, "cluster": ["default"], "namespace": ["team-001", "team-002"],
                    "policy": ["disallow-capabilities-strict", "restrict-seccomp-strict"],
                    "severity": ["high", "critical", "medium"]}
        for variables in (everything, narrowed):
            for title, sql in queries(dashboard).items():
                text = expand(sql, variables, start=start, end=end, interval=86400)
                _, rows = await analytics.analytics(text)
                assert rows, (title, text)
    finally:
        await analytics.close()
        await clickhouse.close()
