"""``reports-pipeline demo``: a fresh data directory gets weeks of history,
the system runs on it, and kubectl, trends and the analytics endpoint show
them; a directory that holds data already is refused in one line."""

from __future__ import annotations

import json
import os
import re
import subprocess
import time
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.conftest import BIN, Kubectl, Up

pytestmark = pytest.mark.e2e


def test_demo_runs_the_system_on_weeks_of_history(tmp_path: Path, browser: Any) -> None:
    data = tmp_path / "demo"
    demo = Up(data, {"REPORTS_TOPIC_PREFIX": "demo"}, verb="demo")
    try:
        demo.wait_ready(timeout=180)
        said = "".join(demo.output)
        written = re.search(r"history written: (\d+) changes from (\S+ \S+) to (\S+ \S+) UTC;"
                            r" (\d+) PolicyReports now, (\d+) failing results", said)
        assert written, said
        changes, first, _, reports, failing = written.groups()
        assert int(changes) > 1000
        assert datetime.strptime(first, "%Y-%m-%d %H:%M").replace(tzinfo=UTC) < (
            datetime.now(UTC) - timedelta(days=27))

        # kubectl sees the history's last state
        k = Kubectl(demo.kubeconfig)
        items = json.loads(k.run("get", "polr", "-A", "-o", "json").stdout)["items"]
        assert len(items) == int(reports)
        assert sum(i["summary"]["fail"] for i in items) == int(failing)

        # the pipeline materializes and aggregates the history by its own times
        query = {"query": "SELECT toDate(window_start) AS day, sum(new_failures)"
                          " FROM policy_windows FINAL GROUP BY day ORDER BY day"}
        (tmp_path / "q.json").write_text(json.dumps(query))
        deadline = time.monotonic() + 120
        while True:
            rows = json.loads(k.run("create", "--raw", "/analytics/v1/query", "-f",
                                    str(tmp_path / "q.json")).stdout)["rows"]
            if len(rows) >= 28 or time.monotonic() > deadline:
                break
            time.sleep(1)
        assert len(rows) >= 28, rows  # a row for every day, not one for the last
        assert sum(int(n) for _, n in rows) > 0

        trends = subprocess.run([str(BIN / "reports-pipeline"), "trends", "--data-dir",
                                 str(data), "--window", "1d", "--since", "28d"],
                                capture_output=True, text=True, timeout=120)
        assert trends.returncode == 0, trends.stderr
        days = Counter(line.split()[0] for line in trends.stdout.splitlines()[1:])
        assert len(days) > 3, trends.stdout  # failures came and went over the days
        screenshots(data, browser)
        assert demo.stop() == 0
    finally:
        demo.kill(group=True)

    # run on the same directory again: refused, nothing touched
    again = subprocess.run([str(BIN / "reports-pipeline"), "demo", "--data-dir", str(data)],
                           capture_output=True, text=True, timeout=60)
    assert again.returncode == 1
    assert again.stderr.strip() == (
        f"reports-pipeline demo: {data} already holds reports; give the demo a new --data-dir"
        " (or run `reports-pipeline up` on this one)")


def screenshots(data: Path, browser: Any) -> None:
    """The dashboard over the demo's weeks, saved as README shows it
    (``REPORTS_DEMO_SCREENSHOTS`` names the directory)."""
    out = Path(os.environ.get("REPORTS_DEMO_SCREENSHOTS", "test-artifacts/demo"))
    out.mkdir(parents=True, exist_ok=True)
    proc = subprocess.Popen([str(BIN / "reports-pipeline"), "dashboard", "--data-dir",
                             str(data), "--port", "0"],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    assert proc.stdout is not None
    try:
        line = proc.stdout.readline()
        match = re.search(r"(http://\S+)", line)
        assert match, line + proc.stdout.read()
        url = match[1]
        base = url.split("/?")[0]
        page = browser.new_page(viewport={"width": 1280, "height": 900})
        page.goto(url)
        page.goto(base + "/?range=30d")
        page.screenshot(path=str(out / "overview.png"), full_page=True)
        page.goto(base + "/trends?range=30d&bucket=1d&rank=change")
        # weeks of series: failures appearing and being fixed
        assert page.locator("svg.chart polyline.series").count() > 3
        page.screenshot(path=str(out / "trends.png"), full_page=True)
        page.goto(base + "/resources?range=30d")
        page.screenshot(path=str(out / "resources.png"), full_page=True)
        page.click("#top-resources tbody tr:first-child td:nth-child(3) a")
        page.wait_for_url(re.compile(r"rname="))
        page.screenshot(path=str(out / "resource.png"), full_page=True)
    finally:
        proc.terminate()
        assert proc.wait(timeout=30) == 0
        proc.stdout.close()
