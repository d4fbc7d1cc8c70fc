"""The real kubectl against ``reports-pipeline up``: apply, get as a table and as
YAML, list across namespaces, delete, and a full restart."""

from __future__ import annotations

import os
import subprocess

import psutil
import pytest
import yaml

from pipeline.model.resources import RESOURCES
from tests.e2e.conftest import BIN, Kubectl
from tests.helpers import report

pytestmark = pytest.mark.e2e
POLR = RESOURCES[0]


def manifest(name: str, namespace: str, fail: int) -> str:
    return yaml.safe_dump(report(POLR, name, namespace, fail=fail))


def test_kubectl_walkthrough_and_restart(up) -> None:  # type: ignore[no-untyped-def]
    first = up()
    k = Kubectl(first.kubeconfig)

    resources = k.run("api-resources").stdout
    for r in RESOURCES:
        line = next(ln for ln in resources.splitlines() if ln.split()[0] == r.plural)
        assert r.short_names[0] in line.split() and r.kind in line.split()

    assert "created" in k.run("apply", "-f", "-", input=manifest("web", "team-a", 2)).stdout
    k.run("apply", "-f", "-", input=manifest("db", "team-b", 0))

    table = k.run("get", "polr", "-n", "team-a").stdout.splitlines()
    assert table[0].split() == ["NAME", "KIND", "NAME", "PASS", "FAIL", "WARN", "ERROR",
                                "SKIP", "AGE"]
    assert table[1].split()[:8] == ["web", "Pod", "kyverno-admission-controller-7d998c79c4-rj7th",
                                    "17", "2", "0", "0", "0"]

    obj = k.yaml("get", "polr", "web", "-n", "team-a")
    assert obj["kind"] == "PolicyReport" and obj["summary"]["fail"] == 2
    assert obj["metadata"]["uid"] and int(obj["metadata"]["resourceVersion"]) > 0
    assert len(obj["results"]) == 19

    everywhere = k.run("get", "polr", "-A").stdout.splitlines()
    assert everywhere[0].split()[0] == "NAMESPACE"
    assert [ln.split()[:2] for ln in everywhere[1:]] == [["team-a", "web"], ["team-b", "db"]]

    assert "deleted" in k.run("delete", "polr", "web", "-n", "team-a").stdout
    missing = k.run("get", "polr", "web", "-n", "team-a", check=False)
    assert missing.returncode != 0 and "NotFound" in missing.stderr

    # A second `up` on the same directory refuses to start.
    second = subprocess.run([str(BIN / "reports-pipeline"), "up", "--data-dir",
                             str(first.data_dir)], capture_output=True, text=True, timeout=60,
                            check=False)
    assert second.returncode != 0 and "already running" in second.stderr

    db_before = k.yaml("get", "polr", "db", "-n", "team-b")
    children = [c.pid for c in psutil.Process(first.proc.pid).children(recursive=True)]
    assert children, "the Kafka broker runs as a child process"
    assert first.stop() == 0
    assert not [pid for pid in children if psutil.pid_exists(pid) and
                psutil.Process(pid).status() != psutil.STATUS_ZOMBIE]

    restarted = up()
    k = Kubectl(restarted.kubeconfig)
    assert k.yaml("get", "polr", "db", "-n", "team-b") == db_before
    assert k.run("get", "polr", "web", "-n", "team-a", check=False).returncode != 0
    k.run("apply", "-f", "-", input=manifest("api", "team-a", 1))
    new = k.yaml("get", "polr", "api", "-n", "team-a")
    assert int(new["metadata"]["resourceVersion"]) > int(
        db_before["metadata"]["resourceVersion"])
    listed = k.yaml("get", "polr", "-A")
    assert sorted(i["metadata"]["name"] for i in listed["items"]) == ["api", "db"]
    assert restarted.stop() == 0
    assert os.path.exists(restarted.kubeconfig)
