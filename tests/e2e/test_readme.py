"""README's commands, run as a user would: the walkthrough's console block
(every ``$`` line, in order, in one shell, against a fresh ``up --data-dir
./data``), then docs/analytics.md's kubectl commands and trend report. The
SQL of docs/analytics.md is run by tests/integration/test_analytics.py, README's helm
install command by tests/integration/test_chart.py, its consumer example by
tests/e2e/test_pipeline_recovery.py."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

from tests.e2e.conftest import Up

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text()
ANALYTICS = (ROOT / "docs" / "analytics.md").read_text()


def section(title: str, document: str = README) -> str:
    start = document.index(f"\n{title}\n")
    end = re.compile(r"^#{1,3} ", re.M).search(document, start + len(title) + 2)
    return document[start:end.start() if end else len(document)]


def blocks(text: str, language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", text, flags=re.S)


def commands(block: str) -> list[str]:
    return [line[2:] for line in block.splitlines() if line.startswith("$ ")]


def test_the_walkthrough_runs_as_written(tmp_path: Path) -> None:
    # a working directory like a clone's: the venv and the repository's files
    (tmp_path / ".venv").symlink_to(Path(sys.executable).parent.parent)
    for name in ("reportsamples", "examples"):
        (tmp_path / name).symlink_to(ROOT / name)
    walkthrough = section("## Walkthrough")
    started, *rest = blocks(walkthrough, "console")
    assert commands(started) == [".venv/bin/reports-pipeline up --data-dir ./data"]
    script = [c for block in rest for c in commands(block)]
    analytics = blocks(section("## ClickHouse SQL", ANALYTICS), "sh")[0]
    script += [line for line in analytics.splitlines() if line.strip()]
    script += [c.replace(".venv/bin/", "") for c in
               commands(blocks(section("## Trend reports", ANALYTICS), "console")[0])]
    assert any("apply -f reportsamples/data/pss-restricted-report.yaml" in c for c in script)
    assert any("create --raw /analytics/v1/query" in c for c in script)

    up = Up(tmp_path / "data", {"REPORTS_TOPIC_PREFIX": "reports"})
    try:
        up.wait_ready()
        env = {k: v for k, v in os.environ.items() if k not in ("KUBECONFIG",)}
        env_file = tmp_path / "env"

        def shell(command: str) -> subprocess.CompletedProcess[str]:
            # one shell per command, carrying the exported variables along
            done = subprocess.run(
                ["bash", "-c", f"set -e; if [ -f {env_file} ]; then . {env_file}; fi;"
                 f" {command}; export -p > {env_file}"],
                cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
            assert done.returncode == 0, f"$ {command}\n{done.stdout}\n{done.stderr}"
            return done

        for command in script:
            done = shell(command)
            if "create --raw" in command and "reports FINAL WHERE NOT deleted" in (
                    tmp_path / "query.json").read_text():
                # ClickHouse holds the report within a second of its creation
                deadline = time.monotonic() + 30
                while "bb228314-0e3e-42c2-b945-63efe9279ad4" not in done.stdout:
                    assert time.monotonic() < deadline, done.stdout
                    time.sleep(0.2)
                    done = shell(command)
            if command.startswith("kubectl apply"):
                assert "bb228314-0e3e-42c2-b945-63efe9279ad4 created" in done.stdout
        assert (tmp_path / "trends.svg").exists()
    finally:
        up.stop(timeout=60)
        up.kill()
