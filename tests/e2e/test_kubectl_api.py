"""kubectl's everyday commands against the frontend: watch, label, annotate,
apply (client- and server-side), patch, explain, delete by label, chunked
lists and output formats."""

from __future__ import annotations

import json
import subprocess
import threading
from queue import Empty, Queue

import pytest
import yaml

from pipeline.model.resources import RESOURCES
from tests.e2e.conftest import Kubectl
from tests.helpers import report

pytestmark = pytest.mark.e2e
POLR = RESOURCES[0]
NS = ("-n", "team")


def manifests(count: int) -> str:
    return yaml.safe_dump_all([report(POLR, f"r{i}", "team", fail=i % 3,
                                      labels={"app": "web" if i % 2 else "db"})
                               for i in range(count)])


class Watch:
    """``kubectl get -w`` in the background, its lines readable as they come."""

    def __init__(self, k: Kubectl, *args: str):
        self.proc = subprocess.Popen([k.binary, "--kubeconfig", str(k.kubeconfig), "get",
                                      *args, "-w"], stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT, text=True)
        self.lines: Queue[str] = Queue()
        self._reader = threading.Thread(target=self._pump, daemon=True)
        self._reader.start()

    def _pump(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.put(line.rstrip("\n"))

    def expect(self, predicate, timeout: float = 30) -> str:  # type: ignore[no-untyped-def]
        while True:
            try:
                line = self.lines.get(timeout=timeout)
            except Empty:
                raise AssertionError("watch did not show the expected line") from None
            if predicate(line):
                return line

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=10)
        self._reader.join(timeout=10)
        assert self.proc.stdout is not None
        self.proc.stdout.close()


def test_kubectl_commands(up) -> None:  # type: ignore[no-untyped-def]
    k = Kubectl(up().kubeconfig)
    k.run("apply", "-f", "-", input=manifests(5))

    watch = Watch(k, "polr", *NS, "--output-watch-events")
    try:
        watch.expect(lambda ln: ln.split()[:2] == ["ADDED", "r4"])
        k.run("apply", "-f", "-", input=yaml.safe_dump(report(POLR, "new", "team")))
        watch.expect(lambda ln: ln.split()[:2] == ["ADDED", "new"])
        assert "labeled" in k.run("label", "polr", "new", *NS, "stage=prod").stdout
        watch.expect(lambda ln: ln.split()[:2] == ["MODIFIED", "new"])
        k.run("delete", "polr", "new", *NS)
        watch.expect(lambda ln: ln.split()[:2] == ["DELETED", "new"])
    finally:
        watch.stop()

    assert "annotated" in k.run("annotate", "polr", "r0", *NS, "note=checked").stdout
    r0 = k.yaml("get", "polr", "r0", *NS)
    assert r0["metadata"]["annotations"]["note"] == "checked"

    # client-side apply of a change, then server-side apply of the same
    changed = report(POLR, "r0", "team", fail=2, labels={"app": "db"})
    assert "configured" in k.run("apply", "-f", "-", input=yaml.safe_dump(changed)).stdout
    assert k.yaml("get", "polr", "r0", *NS)["summary"]["fail"] == 2
    changed["summary"]["fail"] = 6
    out = k.run("apply", "--server-side", "--force-conflicts", "-f", "-",
                input=yaml.safe_dump(changed)).stdout
    assert "serverside-applied" in out
    assert k.yaml("get", "polr", "r0", *NS)["summary"]["fail"] == 6

    k.run("patch", "polr", "r1", *NS, "--type=merge", "-p", '{"summary":{"warn":4}}')
    k.run("patch", "polr", "r1", *NS, "--type=json", "-p",
          '[{"op":"replace","path":"/summary/error","value":2}]')
    summary = k.yaml("get", "polr", "r1", *NS)["summary"]
    assert (summary["warn"], summary["error"]) == (4, 2)

    explained = k.run("explain", "policyreport.results").stdout
    assert "FIELD: results <[]Object>" in explained and "severity" in explained

    names = k.run("get", "polr", *NS, "-o", "name").stdout.split()
    assert names == [f"policyreport.wgpolicyk8s.io/r{i}" for i in range(5)]
    chunked = k.run("get", "polr", *NS, "--chunk-size=2", "-v=6")
    assert [ln.split()[0] for ln in chunked.stdout.splitlines()[1:]] == [f"r{i}" for i in
                                                                          range(5)]
    assert chunked.stderr.count("continue=") == 2
    wide = k.run("get", "polr", *NS, "-o", "wide").stdout.splitlines()
    assert wide[0].split()[-2:] == ["POLICIES", "SOURCE"]
    assert wide[1].split()[-2:] == ["17", "kyverno"]
    jsonpath = k.run("get", "polr", *NS, "-o", "jsonpath={.items[*].summary.fail}").stdout
    assert jsonpath.split() == ["6", "1", "2", "0", "1"]

    out = k.run("delete", "polr", *NS, "-l", "app=db").stdout
    assert sorted(ln.split('"')[1] for ln in out.splitlines()) == ["r0", "r2", "r4"]
    remaining = json.loads(k.run("get", "polr", *NS, "-o", "json").stdout)
    assert [i["metadata"]["name"] for i in remaining["items"]] == ["r1", "r3"]
    failed = k.run("patch", "polr", "r1", *NS, "-p", '{"summary":{"warn":1}}', check=False)
    assert failed.returncode != 0 and "strategic merge patch is not supported" in failed.stderr
