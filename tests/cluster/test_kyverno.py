"""Real Kyverno on a fresh store, through kube-apiserver's aggregation layer:
a few Audit ClusterPolicies and 20 Pods in three namespaces (Pending: there is
no kubelet, and Kyverno does not care). Every Pod gets its PolicyReport with
the exact results, no EphemeralReport is left once merged, and after a Pod is
fixed, one deleted and a policy deleted, the reports, ``policy_counts``, the
trend tables and the dashboard all follow with exact counts. Then the same
with Kyverno's openreports.io output."""

from __future__ import annotations

import html
import json
import re
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.cluster.conftest import Cluster, Kubectl, System
from tests.cluster.controlplane import Process, wait_until
from tests.cluster.kyverno import Kyverno

pytestmark = pytest.mark.cluster
NAMESPACES = ("kyv-a", "kyv-b", "kyv-c")
PODS = 20


def _policy(name: str, rule: str, message: str, pattern: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": "kyverno.io/v1", "kind": "ClusterPolicy",
            "metadata": {"name": name},
            "spec": {"background": True, "rules": [{
                "name": rule, "match": {"any": [{"resources": {"kinds": ["Pod"]}}]},
                "validate": {"failureAction": "Audit", "message": message,
                             "pattern": pattern}}]}}


POLICIES = {
    "require-app-label": _policy("require-app-label", "check-app-label",
                                 "the label app is required",
                                 {"metadata": {"labels": {"app": "?*"}}}),
    "disallow-latest-tag": _policy("disallow-latest-tag", "check-image-tag",
                                   "images must not use the latest tag",
                                   {"spec": {"containers": [{"image": "!*:latest"}]}}),
    "require-memory-limits": _policy("require-memory-limits", "check-memory-limit",
                                     "containers must set a memory limit",
                                     {"spec": {"containers": [{"resources": {
                                         "limits": {"memory": "?*"}}}]}}),
}
RULES = {name: p["spec"]["rules"][0]["name"] for name, p in POLICIES.items()}


def pod(i: int) -> dict[str, Any]:
    container: dict[str, Any] = {"name": "c", "image": "nginx:latest" if i % 5 == 0
                                 else "nginx:1.27"}
    if i % 2 == 0:
        container["resources"] = {"limits": {"memory": "64Mi", "cpu": "100m"}}
    labels = {"app": f"app-{i}"} if i % 4 != 0 else {"team": "none"}
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": f"pod-{i}", "namespace": NAMESPACES[i % 3], "labels": labels},
            "spec": {"containers": [container]}}


def expected(spec: dict[str, Any], policies: set[str]) -> set[tuple[str, str, str]]:
    """(policy, rule, result) of each policy for a Pod as its spec is."""
    container = spec["spec"]["containers"][0]
    passes = {
        "require-app-label": bool(spec["metadata"].get("labels", {}).get("app")),
        "disallow-latest-tag": not container["image"].endswith(":latest"),
        "require-memory-limits": bool(container.get("resources", {}).get("limits", {})
                                      .get("memory")),
    }
    return {(p, RULES[p], "pass" if passes[p] else "fail") for p in policies}


class World:
    """The Pods as they are now, the policies in force, and the kind of
    report Kyverno writes."""

    def __init__(self, kubectl: Kubectl):
        self.kubectl = kubectl
        self.pods = {i: pod(i) for i in range(PODS)}
        self.policies = set(POLICIES)

    def uids(self) -> dict[int, str]:
        listed = self.kubectl.json("get", "pods", "-A")["items"]
        by_name = {(p["metadata"]["namespace"], p["metadata"]["name"]): p["metadata"]["uid"]
                   for p in listed}
        return {i: by_name[(p["metadata"]["namespace"], p["metadata"]["name"])]
                for i, p in self.pods.items()}

    def reports(self, resource: str) -> dict[str, dict[str, Any]]:
        """The reports of ``resource`` in the Pods' namespaces, by the uid of
        the Pod they are about."""
        found = {}
        for ns in NAMESPACES:
            for item in self.kubectl.json("get", resource, "-n", ns)["items"]:
                found[item.get("scope", {}).get("uid", "")] = item
        return found

    def mismatches(self, resource: str) -> list[str]:
        reports, uids = self.reports(resource), self.uids()
        wrong = []
        for i, uid in uids.items():
            want = expected(self.pods[i], self.policies)
            got = reports.get(uid)
            if got is None:
                wrong.append(f"pod-{i}: no report")
                continue
            results = {(r["policy"], r["rule"], r["result"]) for r in got.get("results", [])}
            if results != want:
                wrong.append(f"pod-{i}: {sorted(results)} != {sorted(want)}")
                continue
            summary = got.get("summary", {})
            counts = Counter(r for _, _, r in want)
            if (summary.get("pass", 0), summary.get("fail", 0)) != (counts["pass"],
                                                                   counts["fail"]):
                wrong.append(f"pod-{i}: summary {summary}")
        stale = set(reports) - set(uids.values())
        if stale:
            wrong.append(f"reports of no Pod: {sorted(stale)}")
        return wrong

    def counts(self) -> dict[tuple[str, str], tuple[int, int]]:
        """(namespace, policy) -> (pass, fail) of the current state."""
        counts: Counter[tuple[str, str, str]] = Counter()
        for spec in self.pods.values():
            for policy, _, result in expected(spec, self.policies):
                counts[(spec["metadata"]["namespace"], policy, result)] += 1
        return {(ns, p): (counts[(ns, p, "pass")], counts[(ns, p, "fail")])
                for ns in NAMESPACES for p in POLICIES}


def analytics(system: System, sql: str) -> list[list[Any]]:
    """A query to the system's analytics endpoint, with `up`'s own kubeconfig."""
    done = system.cluster.kubectl.run(
        "--kubeconfig", str(system.data_dir / "kubeconfig"), "create", "--raw",
        "/analytics/v1/query", "-f", "-", input=json.dumps({"query": sql}))
    return json.loads(done.stdout)["rows"]  # type: ignore[no-any-return]


def policy_counts(system: System) -> dict[tuple[str, str], tuple[int, int]]:
    rows = analytics(system, "SELECT namespace, policy, pass, fail FROM policy_counts FINAL"
                             " WHERE namespace LIKE 'kyv-%'")
    return {(ns, p): (int(passed), int(failed)) for ns, p, passed, failed in rows}


def window_counts(system: System) -> dict[tuple[str, str], tuple[int, int]]:
    """The counts at the end of each series' latest window."""
    rows = analytics(system, "SELECT namespace, policy, argMax(pass, window_start),"
                             " argMax(fail, window_start) FROM policy_windows FINAL"
                             " WHERE namespace LIKE 'kyv-%' GROUP BY namespace, policy")
    return {(ns, p): (int(passed), int(failed)) for ns, p, passed, failed in rows}


def totals_by_policy(system: System) -> dict[str, tuple[int, int]]:
    rows = analytics(system, "SELECT policy, argMax(pass, window_start),"
                             " argMax(fail, window_start) FROM policy_totals_windows FINAL"
                             " GROUP BY policy")
    return {p: (int(passed), int(failed)) for p, passed, failed in rows}


def nonzero(counts: dict[tuple[str, str], tuple[int, int]]
            ) -> dict[tuple[str, str], tuple[int, int]]:
    return {k: v for k, v in counts.items() if v != (0, 0)}


@pytest.fixture(scope="module")
def kyverno(system: System, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Kyverno]:
    installed = Kyverno(system.cluster, tmp_path_factory.mktemp("kyverno"))
    try:
        installed.start()
        yield installed
    finally:
        installed.stop()


@pytest.fixture(scope="module")
def world(system: System, kyverno: Kyverno) -> World:
    cluster: Cluster = system.cluster
    kubectl = cluster.kubectl
    policies = yaml.safe_dump_all(list(POLICIES.values()))
    # Kyverno's webhook may still be loading the certificate it just made
    wait_until(lambda: kubectl.run("apply", "-f", "-", input=policies,
                                   check=False).returncode == 0,
               "the policies admitted", timeout=60, every=1)
    wait_until(lambda: all(
        any(c["type"] == "Ready" and c["status"] == "True"
            for c in kubectl.json("get", "clusterpolicy", name).get("status", {}).get(
                "conditions", []))
        for name in POLICIES), "the policies ready", timeout=120, every=1)
    for ns in NAMESPACES:
        kubectl.run("create", "namespace", ns)
        cluster.wait_for_default_service_account(ns)
    made = World(kubectl)
    kubectl.apply(list(made.pods.values()))
    return made


@pytest.mark.timeout(900)
def test_every_pod_gets_its_exact_report_and_every_change_follows(
        system: System, kyverno: Kyverno, world: World) -> None:
    kubectl = system.cluster.kubectl

    def settled(resource: str) -> bool:
        return not world.mismatches(resource)

    def no_ephemeral_reports() -> bool:
        return kubectl.run("get", "ephemeralreports.reports.kyverno.io", "-A", "-o", "name"
                           ).stdout.strip() == ""

    def converged(what: str) -> None:
        try:
            wait_until(lambda: settled("policyreports.wgpolicyk8s.io"), what, timeout=240,
                       every=2)
            wait_until(no_ephemeral_reports, f"{what}: every EphemeralReport merged",
                       timeout=120, every=2)
        except AssertionError as err:
            raise AssertionError(f"{err}\n{world.mismatches('policyreports.wgpolicyk8s.io')}"
                                 f"\n{kyverno.logs()}") from err
        wait_until(lambda: nonzero(policy_counts(system)) == nonzero(world.counts()),
                   f"{what}: policy_counts", timeout=60, every=1)
        wait_until(lambda: nonzero(window_counts(system)) == nonzero(world.counts()),
                   f"{what}: policy_windows", timeout=60, every=1)

    converged("a report for every Pod")
    # the store was fresh: Kyverno's first list and watch were at a real version
    assert "initial RV" not in (kyverno.root / "kyverno-reports-controller.log").read_text()

    # a Pod fixed, a Pod deleted, a policy deleted
    fixed = world.pods[0]
    kubectl.run("label", "pod", "-n", fixed["metadata"]["namespace"], "pod-0", "app=fixed")
    kubectl.run("set", "image", "-n", fixed["metadata"]["namespace"], "pod/pod-0",
                "c=nginx:1.27")
    fixed["metadata"]["labels"]["app"] = "fixed"
    fixed["spec"]["containers"][0]["image"] = "nginx:1.27"
    gone = world.pods.pop(1)
    kubectl.run("delete", "pod", "-n", gone["metadata"]["namespace"], "pod-1",
                "--grace-period=0", "--force")
    kubectl.run("delete", "clusterpolicy", "require-memory-limits")
    world.policies.discard("require-memory-limits")
    converged("after the changes")

    totals = totals_by_policy(system)
    for policy in world.policies:
        want = [sum(v[i] for (_, p), v in world.counts().items() if p == policy)
                for i in (0, 1)]
        assert totals.get(policy) == tuple(want), (policy, totals)
    assert dashboard_totals(system) == {
        "pass": sum(v[0] for v in world.counts().values()),
        "fail": sum(v[1] for v in world.counts().values())}


def dashboard_totals(system: System) -> dict[str, int]:
    """The overview page's result cards of the Pods' namespaces."""
    process = Process(system.cluster.netns, [
        str(Path(sys.executable).parent / "reports-pipeline"), "dashboard", "--data-dir",
        str(system.data_dir), "--port", "18080"], system.root / "dashboard.log")
    try:
        wait_until(lambda: "Dashboard: http" in process.log.read_text(), "the dashboard",
                   timeout=60, alive=[process])
        url = re.search(r"Dashboard: (\S+)\?token=(\S+)", process.log.read_text())
        assert url is not None
        page = subprocess.run(system.cluster.netns.command([
            sys.executable, "-c", "import sys, urllib.request; print(urllib.request.urlopen("
            "urllib.request.Request(sys.argv[1], headers={'Authorization': 'Bearer '"
            " + sys.argv[2]})).read().decode())", url.group(1), url.group(2)]),
            capture_output=True, text=True, check=True, timeout=60).stdout
    finally:
        process.stop()
    cards = dict(re.findall(r'data-status="(\w+)">(\d+)<', html.unescape(page)))
    return {status: int(cards[status]) for status in ("pass", "fail")}


@pytest.mark.timeout(600)
def test_openreports_output(system: System, kyverno: Kyverno, world: World) -> None:
    """Kyverno with openreports.io on writes Reports and ClusterReports to
    the same store; every Pod gets its Report with the exact results."""
    kyverno.stop()
    kyverno.start(openreports=True)
    wait_until(lambda: not world.mismatches("reports.openreports.io"),
               "an openreports.io Report for every Pod", timeout=240, every=2)
