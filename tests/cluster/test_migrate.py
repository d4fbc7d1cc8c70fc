"""Moving in and out, on a control plane of its own: a cluster whose reports
live in CRDs (Kyverno's, for 20 Pods, and reports of every kind made by
hand), the system installed beside it with its APIServices not registered,
``migrate in`` (twice: nothing duplicated), then ``migrate in --switch``
while reports are still being written to the CRDs, the CRDs deleted, every
report read back through kubectl with the same content, Kyverno carrying on
through the store; then ``migrate out --switch-back`` and Kyverno carrying on
through the CRDs again."""

from __future__ import annotations

import copy
import subprocess
import sys
import threading
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from bench.pki import kubeconfig
from tests.cluster.conftest import (
    FRONTEND_PORT,
    GROUP_VERSIONS,
    RELEASE_NAMESPACE,
    Cluster,
    Kubectl,
    System,
    fresh_cluster,
)
from tests.cluster.controlplane import NODE_ADDRESS, wait_until
from tests.cluster.kyverno import Kyverno, report_crds
from tests.cluster.test_kyverno import NAMESPACES, POLICIES, World

pytestmark = pytest.mark.cluster
BIN = Path(sys.executable).parent
HAND = "by-hand"
#: PolicyReports made by hand; the copies list them in pages of PAGE
HAND_REPORTS = 60
PAGE = 25
#: the World's key of a Pod made after the switch
POD_NEW = 1000
KINDS = ("policyreports.wgpolicyk8s.io", "clusterpolicyreports.wgpolicyk8s.io",
         "ephemeralreports.reports.kyverno.io", "clusterephemeralreports.reports.kyverno.io",
         "reports.openreports.io", "clusterreports.openreports.io")
EPHEMERAL = "ephemeralreports.reports.kyverno.io"
KEPT = ("name", "namespace", "labels", "annotations", "ownerReferences", "finalizers")


def result(policy: str, outcome: str) -> dict[str, Any]:
    return {"policy": policy, "rule": "check", "result": outcome, "source": "by-hand",
            "scored": True, "message": f"{policy} {outcome}",
            "timestamp": {"seconds": 1767225600, "nanos": 0}}


def by_hand(owner: dict[str, Any]) -> list[dict[str, Any]]:
    """Reports of every kind, with labels, annotations, an ownerReference to
    a ConfigMap and a finalizer."""
    ref = {"apiVersion": "v1", "kind": "ConfigMap", "name": owner["metadata"]["name"],
           "uid": owner["metadata"]["uid"]}
    docs: list[dict[str, Any]] = []
    for i in range(HAND_REPORTS):
        meta: dict[str, Any] = {"name": f"hand-{i}", "namespace": HAND,
                                "labels": {"team": "a", "n": str(i)},
                                "annotations": {"note": f"report {i}"}}
        if i == 0:
            meta["ownerReferences"] = [ref]
        if i == 1:
            meta["finalizers"] = ["example.com/audit"]
        docs.append({"apiVersion": "wgpolicyk8s.io/v1alpha2", "kind": "PolicyReport",
                     "metadata": meta, "results": [result(f"p{i % 7}", "fail")],
                     "summary": {"fail": 1, "pass": 0, "warn": 0, "error": 0, "skip": 0}})
    docs += [
        {"apiVersion": "wgpolicyk8s.io/v1alpha2", "kind": "ClusterPolicyReport",
         "metadata": {"name": "cluster-hand", "labels": {"team": "a"}},
         "results": [result("cluster-policy", "pass")], "summary": {"pass": 1}},
        {"apiVersion": "reports.kyverno.io/v1", "kind": "EphemeralReport",
         "metadata": {"name": "hand-ephr", "namespace": HAND, "labels": {"team": "a"}},
         "spec": {"owner": ref, "results": [result("p1", "pass")], "summary": {"pass": 1}}},
        {"apiVersion": "reports.kyverno.io/v1", "kind": "ClusterEphemeralReport",
         "metadata": {"name": "hand-cephr", "labels": {"team": "a"}},
         "spec": {"owner": ref, "results": [result("p2", "warn")],
                  "summary": {"warn": 1}}},
        {"apiVersion": "openreports.io/v1alpha1", "kind": "Report",
         "metadata": {"name": "hand-rep", "namespace": HAND, "annotations": {"a": "b"}},
         "results": [result("p3", "fail")], "summary": {"fail": 1}},
        {"apiVersion": "openreports.io/v1alpha1", "kind": "ClusterReport",
         "metadata": {"name": "hand-crep", "labels": {"team": "a"}},
         "results": [result("p4", "skip")], "summary": {"skip": 1}},
    ]
    return docs


def content(obj: dict[str, Any]) -> dict[str, Any]:
    """What a copy keeps: the kept metadata and every other field."""
    meta = obj["metadata"]
    return {"metadata": {k: meta[k] for k in KEPT if meta.get(k)},
            **{k: v for k, v in obj.items() if k not in ("metadata", "apiVersion", "kind")}}


def everything(kubectl: Kubectl, kinds: tuple[str, ...] = KINDS
               ) -> dict[tuple[str, str, str], dict[str, Any]]:
    """Every report of every kind the cluster serves, by (kind, namespace, name)."""
    found = {}
    for kind in kinds:
        for obj in kubectl.json("get", kind, "-A")["items"]:
            meta = obj["metadata"]
            found[(kind, meta.get("namespace", ""), meta["name"])] = obj
    return found


def same(a: dict[tuple[str, str, str], dict[str, Any]],
         b: dict[tuple[str, str, str], dict[str, Any]], *, uids: dict[str, str]) -> list[str]:
    """How ``b`` differs from ``a`` (ownerReferences to reports compared by
    the uid their owner has on each side)."""
    wrong = [f"missing: {k}" for k in sorted(set(a) - set(b))]
    wrong += [f"extra: {k}" for k in sorted(set(b) - set(a))]
    for k in sorted(set(a) & set(b)):
        left, right = content(a[k]), copy.deepcopy(content(b[k]))
        for ref in right["metadata"].get("ownerReferences", []):
            ref["uid"] = uids.get(ref["uid"], ref["uid"])
        if left != right:
            wrong.append(f"differs: {k}: {left} != {right}")
    return wrong


def unstamped(objs: dict[tuple[str, str, str], dict[str, Any]]
              ) -> dict[tuple[str, str, str], dict[str, Any]]:
    """``objs`` with their results' timestamps left out: Kyverno rewrites its
    reports at every background scan with new timestamps, and a scan may land
    between a copy and the read that checks it."""
    out = copy.deepcopy(objs)
    for obj in out.values():
        for result in obj.get("results") or []:
            result.pop("timestamp", None)
    return out


def uid_map(a: dict[tuple[str, str, str], dict[str, Any]],
            b: dict[tuple[str, str, str], dict[str, Any]]) -> dict[str, str]:
    """uid in ``b`` -> uid in ``a`` of the same object."""
    return {b[k]["metadata"]["uid"]: a[k]["metadata"]["uid"] for k in set(a) & set(b)}


def admitted(kubectl: Kubectl, *args: str) -> None:
    """A change to a Pod, once Kyverno's restarted webhook server answers."""
    wait_until(lambda: kubectl.run(*args, check=False).returncode == 0,
               f"kubectl {' '.join(args)} admitted", timeout=120, every=1)


def converge(world: World, what: str) -> None:
    """Wait until every Pod's PolicyReport has Kyverno's exact results."""
    try:
        wait_until(lambda: not world.mismatches("policyreports.wgpolicyk8s.io"), what,
                   timeout=300, every=2)
    except AssertionError as err:
        raise AssertionError(f"{err}: {world.mismatches('policyreports.wgpolicyk8s.io')}"
                             ) from err


def mine(found: dict[tuple[str, str, str], dict[str, Any]]
         ) -> dict[tuple[str, str, str], dict[str, Any]]:
    """The reports made by hand (not Kyverno's, nor the writer's)."""
    return {k: v for k, v in found.items() if (k[1] == HAND or k[1] == "")
            and not k[2].startswith("during-")}


def lasting(found: dict[tuple[str, str, str], dict[str, Any]]) -> set[tuple[str, str, str]]:
    """The keys but Kyverno's EphemeralReports (which come and go in seconds)."""
    return {k for k in found if not (k[1] in NAMESPACES and k[0] == EPHEMERAL)}


def kyverno_ephemeral(kubectl: Kubectl) -> list[str]:
    return [k[2] for k in everything(kubectl, (EPHEMERAL,))
            if k[1] in NAMESPACES]


def summary(stdout: str) -> dict[str, dict[str, int]]:
    """The summary table: resource (and total) -> outcome -> count."""
    lines = [line.split() for line in stdout.splitlines() if line.strip()]
    head = next(line for line in lines if line[0] == "copied")
    return {line[0]: dict(zip(head, map(int, line[1:]), strict=True))
            for line in lines if len(line) == len(head) + 1 and line[1].isdigit()}


class Migrator:
    """``reports-pipeline migrate`` inside the namespace: the cluster as the
    admin kubeconfig has it, the store's frontend reached directly with a
    service account's token (as through a port-forward)."""

    def __init__(self, cluster: Cluster, system: System, root: Path):
        self.cluster = cluster
        kubectl = cluster.kubectl
        kubectl.run("create", "serviceaccount", "migrator", "-n", RELEASE_NAMESPACE)
        kubectl.run("create", "clusterrolebinding", "migrator", "--clusterrole=cluster-admin",
                    f"--serviceaccount={RELEASE_NAMESPACE}:migrator")
        token = kubectl.run("create", "token", "migrator", "-n", RELEASE_NAMESPACE,
                            "--duration=48h").stdout.strip()
        self.store = kubeconfig(root / "store.kubeconfig",
                                server=f"https://{NODE_ADDRESS}:{FRONTEND_PORT}", ca=system.ca,
                                token=token, tls_server_name=system.service_host)

    def argv(self, direction: str, *args: str) -> list[str]:
        return self.cluster.netns.command([
            str(BIN / "reports-pipeline"), "migrate", direction, "--kubeconfig",
            str(self.cluster.plane.admin), "--store", str(self.store),
            "--page-size", str(PAGE), *args])

    def run(self, direction: str, *args: str) -> dict[str, dict[str, int]]:
        done = subprocess.run(self.argv(direction, *args), capture_output=True, text=True,
                              timeout=300, check=False)
        with open(self.store.parent / "migrate.log", "a") as log:
            log.write(f"--- migrate {direction} {' '.join(args)}\n{done.stderr}{done.stdout}")
        assert done.returncode == 0, f"migrate {direction}: {done.stderr}\n{done.stdout}"
        return summary(done.stdout)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    with fresh_cluster(tmp_path_factory.mktemp("migrate-plane")) as made:
        yield made


class Writer(threading.Thread):
    """Writes PolicyReports through the cluster's API, one after another,
    until stopped: whichever side serves them, none may be lost."""

    def __init__(self, kubectl: Kubectl):
        super().__init__(daemon=True)
        self.kubectl = kubectl
        self.written: list[str] = []
        self.done = threading.Event()

    def run(self) -> None:
        n = 0
        while not self.done.is_set() and n < 500:
            name = f"during-{n}"
            made = self.kubectl.run("create", "-f", "-", check=False, input=yaml.safe_dump({
                "apiVersion": "wgpolicyk8s.io/v1alpha2", "kind": "PolicyReport",
                "metadata": {"name": name, "namespace": HAND, "labels": {"n": str(n)}},
                "results": [result("during", "pass")], "summary": {"pass": 1}}))
            if made.returncode == 0:
                self.written.append(name)
            n += 1


@pytest.mark.timeout(1500)
def test_migrate_in_and_out_with_kyverno(cluster: Cluster,
                                          tmp_path_factory: pytest.TempPathFactory) -> None:
    root = tmp_path_factory.mktemp("migrate")
    kubectl = cluster.kubectl

    # -- a cluster with its reports in CRDs ------------------------------------
    (root / "kyverno").mkdir()
    kyverno = Kyverno(cluster, root / "kyverno", with_report_crds=True)
    kyverno.start(scan_interval="20s")
    try:
        _with_kyverno(cluster, kubectl, kyverno, root)
    except AssertionError as err:
        raise AssertionError(f"{err}\n{kyverno.logs()}") from err
    finally:
        kyverno.stop()


def _with_kyverno(cluster: Cluster, kubectl: Kubectl, kyverno: Kyverno, root: Path) -> None:
    policies = yaml.safe_dump_all(list(POLICIES.values()))
    wait_until(lambda: kubectl.run("apply", "-f", "-", input=policies,
                                   check=False).returncode == 0,
               "the policies admitted", timeout=60, every=1)
    for ns in (*NAMESPACES, HAND):
        kubectl.run("create", "namespace", ns)
        cluster.wait_for_default_service_account(ns)
    world = World(kubectl)
    kubectl.apply(list(world.pods.values()))
    kubectl.run("create", "configmap", "owner", "-n", HAND)
    owner = kubectl.json("get", "configmap", "owner", "-n", HAND)
    kubectl.apply(by_hand(owner))
    cluster_hand = kubectl.json("get", "clusterpolicyreport", "cluster-hand")
    kubectl.apply({"apiVersion": "wgpolicyk8s.io/v1alpha2", "kind": "PolicyReport",
                   "metadata": {"name": "owned-by-report", "namespace": HAND,
                                "ownerReferences": [{
                                    "apiVersion": "wgpolicyk8s.io/v1alpha2",
                                    "kind": "ClusterPolicyReport", "name": "cluster-hand",
                                    "uid": cluster_hand["metadata"]["uid"]}]},
                   "results": [result("owned", "pass")], "summary": {"pass": 1}})
    converge(world, "Kyverno's reports in the CRDs")
    wait_until(lambda: not kyverno_ephemeral(kubectl), "Kyverno's EphemeralReports merged",
               timeout=120, every=2)

    # -- the system beside it, its APIServices not registered -----------------
    (root / "system").mkdir()
    system = System(cluster, root / "system", register=False)
    system.start()
    try:
        _move(cluster, kubectl, kyverno, system, world, root)
    except AssertionError as err:
        raise AssertionError(f"{err}\n--- up\n{system.process.tail(60) if system.process else ''}"
                             ) from err
    finally:
        system.stop()


def _move(cluster: Cluster, kubectl: Kubectl, kyverno: Kyverno, system: System,
          world: World, root: Path) -> None:
    policyreports = "policyreports.wgpolicyk8s.io"
    migrator = Migrator(cluster, system, root)
    store = Kubectl(cluster.netns, migrator.store)
    in_crds = everything(kubectl)
    assert {k[0] for k in in_crds} == set(KINDS), sorted({k[0] for k in in_crds})
    hand = mine(in_crds)
    assert len(hand) == HAND_REPORTS + 6

    # migrate in: every report copied, the same content, paged (Kyverno's
    # own are checked by their results once the store serves them: it keeps
    # writing meanwhile)
    first = migrator.run("in")
    assert first["total"]["failed"] == 0, first
    # Kyverno's EphemeralReports of the snapshot may be merged and gone by the copy
    assert first["total"]["copied"] >= len(lasting(in_crds)), (
        first, Counter(k[0] for k in in_crds))
    copied = everything(store)
    assert not same(hand, mine(copied), uids=uid_map(in_crds, copied))
    assert copied.keys() >= {k for k in in_crds if k[1] in NAMESPACES
                             and k[0] == policyreports}
    assert copied[(policyreports, HAND, "hand-1")]["metadata"]["finalizers"] == [
        "example.com/audit"]
    owned = copied[(policyreports, HAND, "owned-by-report")]["metadata"]["ownerReferences"]
    assert owned[0]["uid"] == copied[("clusterpolicyreports.wgpolicyk8s.io", "",
                                      "cluster-hand")]["metadata"]["uid"]

    # again: nothing duplicated, nothing written of what did not change
    again = migrator.run("in")
    assert again["total"]["failed"] == 0, again
    assert again["total"]["unchanged"] >= len(hand), again
    assert lasting(everything(store)) == lasting(everything(kubectl))
    # Kyverno's PolicyReports too: the same results (a scan since may have
    # stamped them anew)
    theirs = {k: v for k, v in everything(kubectl).items() if k[1] in NAMESPACES
              and k[0] == policyreports}
    ours = everything(store)
    assert theirs and not same(unstamped(theirs),
                               unstamped({k: v for k, v in ours.items() if k in theirs}),
                               uids=uid_map(theirs, ours))

    # the finalizer's owner is done with hand-1 (a CRD with a finalizer left
    # on one of its objects could not be deleted after the switch)
    kubectl.run("patch", policyreports, "hand-1", "-n", HAND, "--type=merge",
                "-p", '{"metadata":{"finalizers":null}}')

    # the switch, while reports are being written, created and deleted
    manifest = root / "apiservices.yaml"
    manifest.write_text(kubectl.json("get", "configmap", "-n", RELEASE_NAMESPACE,
                                     "reports-pipeline-apiservices")["data"]["apiservices.yaml"])
    writer = Writer(kubectl)
    writer.start()
    wait_until(lambda: len(writer.written) >= 3, "writes to the CRDs", timeout=60)
    kubectl.run("delete", policyreports, "hand-59", "-n", HAND)
    kubectl.run("label", policyreports, "hand-2", "-n", HAND, "phase=during")
    switched = subprocess.run(migrator.argv("in", "--switch", str(manifest), "--settle", "3"),
                              capture_output=True, text=True, timeout=300, check=False)
    writer.done.set()
    writer.join(timeout=60)
    with open(root / "migrate.log", "a") as log:
        log.write(f"--- migrate in --switch\n{switched.stderr}{switched.stdout}")
    assert switched.returncode == 0, f"{switched.stderr}\n{switched.stdout}"
    assert "now points at service" in switched.stderr
    assert summary(switched.stdout)["total"]["failed"] == 0
    system.wait_available()

    # kubectl now reads the store: every report, the same content, and every
    # report written meanwhile
    served = everything(kubectl)
    expected = {k: v for k, v in hand.items() if k != (policyreports, HAND, "hand-59")}
    expected[(policyreports, HAND, "hand-2")] = copy.deepcopy(
        in_crds[(policyreports, HAND, "hand-2")])
    expected[(policyreports, HAND, "hand-2")]["metadata"]["labels"]["phase"] = "during"
    expected[(policyreports, HAND, "hand-1")] = copy.deepcopy(
        in_crds[(policyreports, HAND, "hand-1")])
    del expected[(policyreports, HAND, "hand-1")]["metadata"]["finalizers"]
    during = {k: v for k, v in served.items() if k[2].startswith("during-")}
    missing = sorted(set(writer.written) - {k[2] for k in during})
    assert not missing, f"reports written during the switch are missing: {missing}"
    assert {k[2] for k in during} == set(writer.written)
    assert len(writer.written) >= 3
    assert not same(expected, mine(served), uids=uid_map(in_crds, served))
    assert not world.mismatches(policyreports)

    # the CRDs go (Kyverno first lists from the store); Kyverno carries on
    kyverno.stop()
    kyverno.start(scan_interval="20s")
    kubectl.run("delete", "crd", *KINDS, "--timeout=180s", timeout=240)
    assert mine(everything(kubectl)).keys() == mine(served).keys()
    fixed = world.pods[0]
    admitted(kubectl, "label", "pod", "-n", fixed["metadata"]["namespace"], "pod-0",
             "app=fixed")
    fixed["metadata"]["labels"]["app"] = "fixed"
    gone = world.pods.pop(1)
    kubectl.run("delete", "pod", "-n", gone["metadata"]["namespace"], "pod-1",
                "--grace-period=0", "--force")
    kubectl.apply({**world.pods[2], "metadata": {**world.pods[2]["metadata"],
                                                  "name": "pod-new"}})
    world.pods[POD_NEW] = {**world.pods[2], "metadata": {**world.pods[2]["metadata"],
                                                           "name": "pod-new"}}
    converge(world, "Kyverno's reports through the store")

    # the garbage collector follows the copied ownerReference to its new uid
    kubectl.run("delete", "clusterpolicyreport", "cluster-hand")
    wait_until(lambda: kubectl.run("get", policyreports, "owned-by-report", "-n", HAND,
                                   check=False).returncode != 0,
               "the report owned by a deleted report collected", timeout=180, every=2)

    # -- and out again ---------------------------------------------------------
    crds = report_crds()
    kubectl.run("apply", "--server-side", "-f", "-", input=yaml.safe_dump_all(crds))
    kubectl.run("wait", "--for=condition=Established", "--timeout=60s",
                *[f"crd/{d['metadata']['name']}" for d in crds])
    in_store = everything(kubectl)  # still the store: its APIServices stay
    assert mine(in_store).keys() == mine(everything(store)).keys()
    back = migrator.run("out", "--switch-back")
    assert back["total"]["failed"] == 0, back
    for name in GROUP_VERSIONS:
        assert not kubectl.json("get", "apiservice", name)["spec"].get("service"), name
    in_crds_again = everything(kubectl)
    moved = {k: v for k, v in in_store.items() if k in mine(in_store)
             or k[2].startswith("during-")}
    assert not same(moved, {k: v for k, v in in_crds_again.items() if k in moved},
                    uids=uid_map(in_store, in_crds_again))
    assert moved.keys() <= in_crds_again.keys()
    assert not world.mismatches(policyreports)
    kyverno.stop()
    kyverno.start(scan_interval="20s")
    admitted(kubectl, "label", "pod", "-n", world.pods[3]["metadata"]["namespace"], "pod-3",
             "app=moved-back", "--overwrite")
    world.pods[3]["metadata"]["labels"]["app"] = "moved-back"
    converge(world, "Kyverno's reports in the CRDs again")
    # again: Kyverno's newer reports in the CRDs are kept, nothing duplicated
    twice = migrator.run("out")
    assert twice["policyreports"]["copied"] == 0 and twice["total"]["failed"] == 0, twice

