"""The system behind a real kube-apiserver's aggregation layer, driven with
the real kubectl as users and controllers meet it: discovery and OpenAPI as
the aggregator gathers them, RBAC through SubjectAccessReviews, the namespace
controller and the garbage collector, a restart, and SIGTERM with watches
open."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import yaml

from pipeline.model.resources import RESOURCES
from tests.cluster.conftest import GROUP_VERSIONS, Cluster, Kubectl, System
from tests.cluster.controlplane import kubeconfig, wait_until
from tests.e2e.test_readme import blocks, commands, section
from tests.helpers import report

pytestmark = pytest.mark.cluster
ROOT = Path(__file__).resolve().parents[2]
SAMPLE_NAME = "bb228314-0e3e-42c2-b945-63efe9279ad4"


def test_the_apiservices_are_available(system: System) -> None:
    for name in GROUP_VERSIONS:
        conditions = system.cluster.kubectl.json("get", "apiservice", name)["status"][
            "conditions"]
        assert {"type": "Available", "status": "True"} in [
            {k: c[k] for k in ("type", "status")} for c in conditions]


def test_the_walkthrough_through_kube_apiserver(system: System) -> None:
    """README's walkthrough with kubectl pointed at kube-apiserver: the same
    commands, the same answers; the analytics query and the trend report go
    to the system itself, as README says."""
    cwd = system.root
    for name in ("reportsamples", "examples"):
        if not (cwd / name).exists():
            (cwd / name).symlink_to(ROOT / name)
    script = [c for block in blocks(section("## Walkthrough"), "console")[1:]
              for c in commands(block)]
    env_file = cwd / "env"
    outputs = {}
    for command in script:
        if command.startswith("export KUBECONFIG="):
            command = (f"export KUBECONFIG={system.cluster.plane.admin}"
                       f" PATH={Path(sys.executable).parent}:$PATH")
        if "create --raw /analytics/" in command:  # not an aggregated API path
            command = command.replace("kubectl ", f"kubectl --kubeconfig {system.data_dir}"
                                      "/kubeconfig ", 1)
        done = subprocess.run(system.cluster.netns.command(
            ["bash", "-c", f"set -e; if [ -f {env_file} ]; then . {env_file}; fi;"
             f" {command}; export -p > {env_file}"]),
            cwd=cwd, capture_output=True, text=True, timeout=120)
        deadline = time.monotonic() + 30
        while ("create --raw" in command and SAMPLE_NAME not in done.stdout
               and "FINAL WHERE NOT deleted" in (cwd / "query.json").read_text()
               and time.monotonic() < deadline):
            time.sleep(0.5)  # ClickHouse holds it within a second or so
            done = subprocess.run(system.cluster.netns.command(
                ["bash", "-c", f". {env_file}; {command}"]), cwd=cwd, capture_output=True,
                text=True, timeout=120)
        assert done.returncode == 0, f"$ {command}\n{done.stdout}\n{done.stderr}"
        outputs[command] = done.stdout
    applied = next(v for k, v in outputs.items() if k.startswith("kubectl apply"))
    assert f"ephemeralreport.reports.kyverno.io/{SAMPLE_NAME} created" in applied
    listed = next(v for k, v in outputs.items() if k.startswith("kubectl get ephr -A"))
    assert SAMPLE_NAME in listed and "kyverno-admission-controller" in listed
    explained = next(v for k, v in outputs.items() if k.startswith("kubectl explain"))
    assert "FIELD: result" in explained or "result" in explained
    deleted = next(v for k, v in outputs.items() if k.startswith("kubectl delete"))
    assert f'"{SAMPLE_NAME}" deleted' in deleted


def test_kubectl_explain_and_the_cluster_openapi(system: System) -> None:
    """The aggregator downloads /openapi/v2 and /openapi/v3 as
    system:aggregator (no groups): allowed through system:authenticated, so
    every kind's schema is in the cluster's OpenAPI and `kubectl explain`
    works for each."""
    kubectl = system.cluster.kubectl

    def merged() -> bool:
        index = json.loads(kubectl.run("get", "--raw", "/openapi/v3").stdout)["paths"]
        return all(f"apis/{r.group}/{r.version}" in index for r in RESOURCES)

    wait_until(merged, "the report groups in the cluster's /openapi/v3", timeout=60)
    v2 = json.loads(kubectl.run("get", "--raw", "/openapi/v2").stdout)
    for rtype in RESOURCES:
        assert f"/apis/{rtype.group}/{rtype.version}/{rtype.plural}" in v2["paths"] or any(
            f"/apis/{rtype.group}/{rtype.version}/namespaces/{{namespace}}/{rtype.plural}"
            == path for path in v2["paths"]), rtype.id
        v3 = json.loads(kubectl.run("get", "--raw",
                                    f"/openapi/v3/apis/{rtype.group}/{rtype.version}").stdout)
        assert v3["components"]["schemas"]
        explained = kubectl.run("explain", f"{rtype.plural}.{rtype.group}").stdout
        assert f"KIND:       {rtype.kind}" in explained, explained
        assert f"GROUP:      {rtype.group}" in explained
    results = kubectl.run("explain", "policyreport.results.result").stdout
    assert "FIELD: result <string>" in results
    # the aggregator's downloads were allowed
    assert "system:aggregator" not in system.output()


def _reviews_for(cluster: Cluster, user: str) -> list[dict]:  # type: ignore[type-arg]
    return [r for r in cluster.plane.access_reviews() if r.get("user") == user]


def test_rbac_through_subject_access_reviews(system: System) -> None:
    kubectl = system.cluster.kubectl
    for ns in ("team-a", "team-b"):
        kubectl.run("create", "namespace", ns)
    kubectl.run("create", "role", "reports-reader", "-n", "team-a", "--verb=get,list,watch",
                "--resource=policyreports.wgpolicyk8s.io")
    kubectl.run("create", "rolebinding", "alice-reads", "-n", "team-a",
                "--role=reports-reader", "--user=alice")
    kubectl.apply(report(RESOURCES[0], "r1", "team-a"))
    kubectl.apply(report(RESOURCES[0], "r1", "team-b"))
    alice = kubectl.as_user("alice", "developers")
    assert "r1" in alice.run("get", "polr", "-n", "team-a").stdout
    denied = alice.run("get", "polr", "-n", "team-b", check=False)
    assert denied.returncode == 1
    assert ('policyreports.wgpolicyk8s.io is forbidden: User "alice" cannot list resource'
            ' "policyreports" in API group "wgpolicyk8s.io" in the namespace "team-b"'
            in denied.stderr), denied.stderr
    created = alice.run("create", "-f", "-", "-n", "team-a", check=False,
                        input=yaml.safe_dump(report(RESOURCES[0], "r2", "team-a")))
    assert created.returncode == 1 and "cannot create resource" in created.stderr
    for verb, ns, answer in (("list", "team-a", "yes"), ("list", "team-b", "no"),
                             ("create", "team-a", "no"), ("watch", "team-a", "yes")):
        said = alice.run("auth", "can-i", verb, "policyreports.wgpolicyk8s.io", "-n", ns,
                         check=False).stdout.strip()
        assert said == answer, (verb, ns)
    # what the frontend asked kube-apiserver (which refused team-b itself,
    # before proxying): the user, her groups with system:authenticated
    asked = [r for r in _reviews_for(system.cluster, "alice") if "resourceAttributes" in r]
    assert asked and all("system:authenticated" in r["groups"] and "developers" in r["groups"]
                         for r in asked)
    assert {r["resourceAttributes"]["namespace"] for r in asked} == {"team-a"}

    # a service account's token: the reviews carry its uid
    kubectl.run("create", "serviceaccount", "auditor", "-n", "team-a")
    kubectl.run("create", "rolebinding", "auditor-reads", "-n", "team-a",
                "--role=reports-reader", "--serviceaccount=team-a:auditor")
    token = kubectl.run("create", "token", "auditor", "-n", "team-a").stdout.strip()
    uid = kubectl.json("get", "serviceaccount", "auditor", "-n", "team-a")["metadata"]["uid"]
    plane = system.cluster.plane
    sa = Kubectl(system.cluster.netns, kubeconfig(
        system.root / "auditor.kubeconfig", server=plane.server, ca=plane.ca.pem, token=token))
    listed = sa.run("get", "polr", "-n", "team-a")
    assert "r1" in listed.stdout
    asked = _reviews_for(system.cluster, "system:serviceaccount:team-a:auditor")
    assert asked and asked[-1]["uid"] == uid
    assert "system:serviceaccounts:team-a" in asked[-1]["groups"]


def test_namespace_deletion_removes_its_reports(system: System) -> None:
    kubectl = system.cluster.kubectl
    kubectl.run("create", "namespace", "doomed")
    for rtype in RESOURCES:
        if rtype.namespaced:
            kubectl.apply(report(rtype, "r", "doomed"))
    started = time.monotonic()
    kubectl.run("delete", "namespace", "doomed", "--wait=false")
    wait_until(lambda: kubectl.run("get", "namespace", "doomed", check=False).returncode != 0,
               "the namespace gone", timeout=120)
    took = time.monotonic() - started
    for rtype in RESOURCES:
        if rtype.namespaced:
            gone = kubectl.run("get", f"{rtype.plural}.{rtype.group}", "-n", "doomed", "-o",
                               "name").stdout
            assert gone == "", rtype.id
    print(f"namespace with reports deleted in {took:.1f} s")


def test_the_garbage_collector_deletes_reports_of_a_deleted_owner(system: System) -> None:
    kubectl = system.cluster.kubectl
    kubectl.run("create", "namespace", "gc")
    kubectl.run("create", "configmap", "owner", "-n", "gc")
    owner = kubectl.json("get", "configmap", "owner", "-n", "gc")["metadata"]
    reference = {"apiVersion": "v1", "kind": "ConfigMap", "name": "owner",
                 "uid": owner["uid"]}
    for rtype in RESOURCES:
        body = report(rtype, "owned", "gc")
        if not rtype.namespaced:
            body["metadata"]["name"] = "owned-by-gc-configmap"
        else:
            body["metadata"]["ownerReferences"] = [reference]
        kubectl.apply(body)
    kubectl.run("delete", "configmap", "owner", "-n", "gc")

    def collected() -> bool:
        return all(kubectl.run("get", f"{r.plural}.{r.group}", "-n", "gc", "owned",
                               check=False).returncode != 0
                   for r in RESOURCES if r.namespaced)

    wait_until(collected, "the owned reports collected", timeout=120, every=0.5)


def test_a_restarted_frontend_is_available_again_with_its_data(system: System) -> None:
    kubectl = system.cluster.kubectl
    kubectl.run("create", "namespace", "restart", check=False)
    kubectl.apply(report(RESOURCES[0], "kept", "restart"))
    before = kubectl.json("get", "polr", "-n", "restart", "kept")
    assert system.stop() == 0
    wait_until(lambda: not system.available(), "the APIServices unavailable", timeout=60)
    system.start()
    after = kubectl.json("get", "polr", "-n", "restart", "kept")
    assert after == before
    created = kubectl.json("create", "-f", "-", input=yaml.safe_dump(
        report(RESOURCES[0], "next", "restart")))
    assert int(created["metadata"]["resourceVersion"]) > int(
        before["metadata"]["resourceVersion"])


def test_sigterm_with_watches_open_through_the_aggregator(system: System) -> None:
    """Watches through kube-apiserver (kubectl's, and the garbage
    collector's and namespace controller's) end cleanly when the frontend
    stops: no INTERNAL_ERROR at the client, no traceback, within 2 s."""
    kubectl = system.cluster.kubectl
    watch = kubectl.popen("get", "polr", "-A", "--watch", "--output-watch-events")
    assert watch.stdout is not None and watch.stderr is not None
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(watch.stdout or ()), daemon=True)
    reader.start()
    try:
        kubectl.run("create", "namespace", "watched", check=False)
        kubectl.apply(report(RESOURCES[0], "seen", "watched"))
        assert system.process is not None

        def seen() -> bool:
            if any("seen" in line for line in lines):
                return True
            if watch.poll() is not None and not reader.is_alive():
                raise AssertionError(f"the watch ended ({watch.returncode}) before the report:"
                                     f" {watch.stderr.read() if watch.stderr else ''}")
            return False

        wait_until(seen, "the watch saw the report", timeout=30, every=0.05)
        started = time.monotonic()
        os.killpg(system.process.proc.pid, signal.SIGTERM)
        code = watch.wait(timeout=30)
        ended = time.monotonic() - started
        err = watch.stderr.read()
    finally:
        if watch.poll() is None:
            watch.kill()
            watch.wait(timeout=10)
        reader.join(timeout=10)
        watch.stdout.close()
        watch.stderr.close()
    assert system.stop() == 0
    assert code == 0, err
    assert "INTERNAL_ERROR" not in err and "stream error" not in err, err
    assert ended < 2, f"the watch ended {ended:.1f} s after SIGTERM"
    log = system.output()
    assert "Traceback" not in log, log[-4000:]
    manager_log = system.cluster.plane.controller_manager.log.read_text()
    assert "INTERNAL_ERROR" not in manager_log
    system.start()
