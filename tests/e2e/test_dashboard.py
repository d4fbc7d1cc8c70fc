"""The dashboard in real headless Chromium (Debian's, driven by Playwright)
against a running system fed through kubectl: every page shows the numbers
ClickHouse answers, a filter changes the URL and the charts, the content
refreshes in place, and each page is saved as a screenshot
(``REPORTS_SCREENSHOTS`` names the directory; the README's come from here)."""

from __future__ import annotations

import base64
import os
import re
import ssl
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import httpx
import pytest
import yaml

from dashboard import filters
from dashboard.filters import Filters, Span
from pipeline.model.resources import RESOURCES
from tests.e2e.conftest import BIN, Kubectl, Up
from tests.helpers import report

pytestmark = pytest.mark.e2e
POLR = RESOURCES[0]
#: namespace -> failing results of each of its reports
WORKLOAD = {"web": [3, 1], "db": [4], "api": [2, 2, 1], "batch": [0]}
#: then web's first report is fixed: three failures resolved
FIXED = {"web": [0, 1]}


def _reports(fails: dict[str, list[int]]) -> list[dict[str, Any]]:
    docs = []
    for ns, counts in fails.items():
        for i, n in enumerate(counts):
            doc = report(POLR, f"{ns}-{i}", ns, fail=n)
            doc["results"][0]["properties"] = {"score": f"{7.5 + i:.1f}"}  # CVSS-like
            docs.append(doc)
    return docs


class Sql:
    """The running system's analytics endpoint, for the answers to compare."""

    def __init__(self, up: Up):
        self._up = up

    def __call__(self, query: tuple[str, dict[str, Any]]) -> list[list[Any]]:
        # synchronous: Playwright's sync API runs an event loop in this thread
        config = yaml.safe_load(self._up.kubeconfig.read_text())
        cluster = config["clusters"][0]["cluster"]
        ca = base64.b64decode(cluster["certificate-authority-data"]).decode()
        with httpx.Client(base_url=cluster["server"], timeout=30,
                          verify=ssl.create_default_context(cadata=ca), headers={
                              "Authorization": f"Bearer {config['users'][0]['user']['token']}"}
                          ) as client:
            r = client.post("/analytics/v1/query",
                            json={"query": query[0], "parameters": query[1]})
        assert r.status_code == 200, r.text
        return r.json()["rows"]  # type: ignore[no-any-return]


def _await(condition: Any, what: str, timeout: float = 60) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.2)


@pytest.fixture
def dashboard(up) -> Iterator[tuple[Up, str, Sql]]:  # type: ignore[no-untyped-def]
    system: Up = up()
    kubectl = Kubectl(system.kubeconfig)
    sql = Sql(system)
    for round_ in (WORKLOAD, FIXED):
        kubectl.run("apply", "-f", "-", input=yaml.safe_dump_all(_reports(round_)))
        total = sum(sum(v) for v in {**WORKLOAD, **round_}.values())
        _await(lambda t=total: sql(("SELECT sum(fail) FROM policy_counts FINAL", {}))[0][0] == t,
               "the counts in ClickHouse")
    _await(lambda: sql(("SELECT count() FROM reports FINAL WHERE NOT deleted", {}))[0][0] == 7,
           "the reports in ClickHouse")
    proc = subprocess.Popen([str(BIN / "reports-pipeline"), "dashboard", "--data-dir",
                             str(system.data_dir), "--port", "0"],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    assert proc.stdout is not None
    line = proc.stdout.readline()
    match = re.search(r"(http://\S+)", line)
    assert match, line + proc.stdout.read()
    try:
        yield system, match[1], sql
    finally:
        proc.terminate()
        code = proc.wait(timeout=30)
        proc.stdout.close()
        assert code == 0  # SIGTERM stops it cleanly


def _shots() -> Path:
    out = Path(os.environ.get("REPORTS_SCREENSHOTS", "test-artifacts/dashboard"))
    out.mkdir(parents=True, exist_ok=True)
    return out


def _cells(page: Any, table: str, column: int) -> list[str]:
    return [c.strip() for c in page.locator(f"#{table} tbody tr td:nth-child({column})")
            .all_inner_texts()]


def _history(page: Any) -> list[tuple[str, ...]]:
    return list(zip(*(_cells(page, "resource-history", i) for i in range(2, 7)), strict=True))


def test_pages_show_what_clickhouse_answers(dashboard, browser) -> None:  # type: ignore[no-untyped-def]
    system, url, sql = dashboard
    base = url.split("/?")[0]
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    shots = _shots()

    # Overview: the token once (then a cookie), the counts now per cluster and
    # the failing tables, as ClickHouse has them
    page.goto(url)
    assert "token" not in page.url
    [(cluster, passed, failed, *_)] = sql(filters.totals(Filters()))
    assert page.locator(f'[data-cluster="{cluster}"] [data-status="fail"]').inner_text() == \
        str(failed)
    assert page.locator(f'[data-cluster="{cluster}"] [data-status="pass"]').inner_text() == \
        str(passed)
    by_ns = sql(filters.failing_by(Filters(), "namespace"))
    assert _cells(page, "by-namespace", 1) == [r[0] for r in by_ns]
    assert _cells(page, "by-namespace", 2) == [str(r[1]) for r in by_ns]
    assert "batch" not in _cells(page, "by-namespace", 1)  # nothing failing there
    page.screenshot(path=str(shots / "overview.png"), full_page=True)

    # sorting by a column is a link: the URL says it, the rows follow it
    page.click('#by-namespace a[data-sort="namespace"]')
    page.wait_for_url(re.compile(r"sort=-namespace"))
    assert _cells(page, "by-namespace", 1) == sorted((r[0] for r in by_ns), reverse=True)

    # a filter changes the URL and what is shown
    page.goto(base + "/")
    spark_all = page.locator("[data-sparkline-last]").get_attribute("data-sparkline-last")
    page.select_option('select[name="namespace"]', "web")
    page.wait_for_url(re.compile(r"namespace=web"))
    [(_, _, web_failed, *_)] = sql(filters.totals(Filters(namespace="web")))
    assert page.locator('[data-status="fail"]').inner_text() == str(web_failed) == "1"
    assert _cells(page, "by-namespace", 1) == ["web"]
    spark_web = page.locator("[data-sparkline-last]").get_attribute("data-sparkline-last")
    assert (spark_all, spark_web) == (str(failed), "1")

    # Trends: one line per failing series (top 10), each ending at its count now
    page.goto(base + "/trends?range=1h")
    assert "3" in _cells(page, "flows", 3)  # web-0's three resolved failures
    f = Filters(range="1h")
    top = sql(filters.top_series(f, Span.of(f)))
    lines = page.locator("svg.chart polyline.series")
    assert lines.count() == len(top) > 0
    drawn = {lines.nth(i).get_attribute("data-label"): lines.nth(i).get_attribute("data-last")
             for i in range(lines.count())}
    assert drawn == {f"{ns or '(cluster)'} / {policy}": str(vals[-1]) for ns, policy, vals in top}
    page.screenshot(path=str(shots / "trends.png"), full_page=True)
    page.select_option('select[name="rank"]', "change")
    page.wait_for_url(re.compile(r"rank=change"))
    page.fill('input[name="top"]', "2")
    page.locator('input[name="top"]').dispatch_event("change")
    page.wait_for_url(re.compile(r"top=2"))
    assert page.locator("svg.chart polyline.series").count() == 2

    # Resources: the most failing resources, then one resource's results and
    # the history of their statuses
    page.goto(base + "/resources?severity=medium")
    top_resources = sql(filters.top_resources(Filters(severity="medium")))
    assert _cells(page, "top-resources", 3) == [r[2] for r in top_resources]
    assert _cells(page, "top-resources", 4) == [str(r[3]) for r in top_resources]
    page.screenshot(path=str(shots / "resources.png"), full_page=True)
    page.click("#top-resources tbody tr:first-child td:nth-child(3) a")
    page.wait_for_url(re.compile(r"rname="))
    kind, rns, rname = top_resources[0][:3]
    current = sql(filters.resource_results(Filters(), filters.Resource(kind, rns, rname)))
    assert len(_cells(page, "resource-results", 1)) == len(current) > 0
    assert _cells(page, "resource-results", 3).count("fail") == \
        [r[2] for r in current].count("fail")
    assert ("(new)", "fail") in [row[3:] for row in _history(page)]
    # in web, report web-0 was fixed: its results went from fail to pass
    page.goto(base + "/resources?" + urlencode({"kind": kind, "rns": "web", "rname": rname}))
    fixed = [row for row in _history(page) if row[2] == "web-0"]
    assert ("fail", "pass") in [row[3:] for row in fixed] and len(fixed) >= 3
    page.screenshot(path=str(shots / "resource.png"), full_page=True)

    # Findings with scores at or above the threshold
    page.goto(base + "/findings?min_score=8")
    scored = sql(filters.findings(Filters(min_score=8.0)))
    assert _cells(page, "findings", 7) == [f"{r[6]:g}" for r in scored]
    assert len(scored) == 3  # the second report of web and api, the third of api
    page.screenshot(path=str(shots / "findings.png"), full_page=True)

    # Live refresh: new failures show up without reloading the page
    page.goto(base + "/?refresh=1")
    page.evaluate("window.__kept = true")  # gone if the page were reloaded
    Kubectl(system.kubeconfig).run("apply", "-f", "-", input=yaml.safe_dump_all(
        _reports({"late": [5]})))
    page.wait_for_function(
        f"document.querySelector('[data-status=\"fail\"]').innerText === '{failed + 5}'",
        timeout=60_000)
    assert page.evaluate("window.__kept") is True
    page.close()


def test_the_dashboard_refuses_without_the_token_and_explains_bad_filters(dashboard) -> None:  # type: ignore[no-untyped-def]
    _, url, _ = dashboard
    base, token = url.split("/?token=")
    assert httpx.get(base + "/").status_code == 401
    auth = {"Authorization": f"Bearer {token}"}
    bad = httpx.get(base + "/trends?range=2y", headers=auth)
    assert bad.status_code == 400 and "range must be one of" in bad.text
    ok = httpx.get(base + "/trends", headers=auth)
    assert ok.status_code == 200 and "total;dur=" in ok.headers["server-timing"]
