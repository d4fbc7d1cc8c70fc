"""The real-cluster tier: a real kube-apiserver, kube-controller-manager and
etcd (and Kyverno, in its module) in a network namespace of the tests' own,
with the system installed as a cluster operator installs it: the chart's
APIServices, RBAC and Service (rendered with helm), the frontend as `up` with
the chart's serving certificate, the requestheader flags and TokenReview and
SubjectAccessReview under its service account. No report CRDs.

The binaries are built (or found in the cache) once the tests are collected,
before any test runs, so a cold build does not count against a test's
timeout."""

from __future__ import annotations

import base64
import contextlib
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from launcher.migrate.switch import discovery_path
from tests.cluster import binaries
from tests.cluster.controlplane import (
    NODE_ADDRESS,
    ControlPlane,
    Namespace,
    Process,
    kubeconfig,
    wait_until,
)
from tests.e2e.conftest import kubectl_binary

pytestmark = pytest.mark.cluster
ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "deploy" / "helm" / "reports-pipeline"
BIN = Path(sys.executable).parent
RELEASE_NAMESPACE = "reports"
FRONTEND_PORT = 8443
GROUP_VERSIONS = ("v1alpha2.wgpolicyk8s.io", "v1.reports.kyverno.io", "v1alpha1.openreports.io")
CLUSTER_SCOPED = ("ClusterRole", "ClusterRoleBinding", "APIService", "Namespace")
_built: dict[str, Path | BaseException] = {}


def pytest_collection_finish(session: pytest.Session) -> None:
    """Build what the selected tests of this tier need, ahead of them."""
    here = Path(__file__).parent
    wanted = {"etcd", "kubernetes"}
    selected = [item for item in session.items if here in Path(str(item.fspath)).parents]
    if not selected or not can_run():
        return
    if any("kyverno" in item.nodeid for item in selected):
        wanted.add("kyverno")
    if any("clientgo" in item.nodeid for item in selected):
        wanted.add("clientgo")
    for name in [*sorted(wanted), "helm"]:
        started = time.monotonic()
        try:
            _built[name] = _build(name)
        except (subprocess.CalledProcessError, RuntimeError, OSError) as err:
            _built[name] = err
        took = time.monotonic() - started
        if took > 5:
            print(f"\nreal-cluster tier: built {name} in {took:.0f} s", flush=True)


def can_run() -> bool:
    return os.geteuid() == 0


def _build(name: str) -> Path:
    return Path(binaries.helm()) if name == "helm" else binaries.binaries(name)


def built(name: str) -> Path:
    found = _built.get(name)
    if found is None:
        found = _built[name] = _build(name)
    if isinstance(found, BaseException):
        pytest.fail(f"building {name} failed: {found}")
    return found


class Kubectl:
    """The real kubectl, run inside the network namespace."""

    def __init__(self, netns: Namespace, config: Path, *, user: str | None = None):
        self.netns = netns
        self.config = config
        self.user = user

    def as_user(self, user: str, *groups: str) -> Kubectl:
        other = Kubectl(self.netns, self.config, user=user)
        other._groups = groups  # type: ignore[attr-defined]
        return other

    def _argv(self, args: tuple[str, ...]) -> list[str]:
        argv = [kubectl_binary(), "--kubeconfig", str(self.config)]
        if self.user:
            argv += [f"--as={self.user}",
                     *(f"--as-group={g}" for g in getattr(self, "_groups", ()))]
        return self.netns.command([*argv, *args])

    def run(self, *args: str, input: str | None = None, check: bool = True,
            timeout: float = 60) -> subprocess.CompletedProcess[str]:
        result = subprocess.run(self._argv(args), input=input, capture_output=True,
                                text=True, timeout=timeout, check=False)
        if check and result.returncode != 0:
            raise AssertionError(f"kubectl {' '.join(args)} failed ({result.returncode}):\n"
                                 f"{result.stderr}{result.stdout[-2000:]}")
        return result

    def popen(self, *args: str) -> subprocess.Popen[str]:
        return subprocess.Popen(self._argv(args), stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)

    def json(self, *args: str, input: str | None = None) -> Any:
        return json.loads(self.run(*args, "-o", "json", input=input).stdout)

    def apply(self, docs: list[dict[str, Any]] | dict[str, Any], *args: str) -> None:
        docs = docs if isinstance(docs, list) else [docs]
        self.run("apply", *args, "-f", "-", input=yaml.safe_dump_all(docs))


class Cluster:
    def __init__(self, netns: Namespace, plane: ControlPlane):
        self.netns = netns
        self.plane = plane
        self.kubectl = Kubectl(netns, plane.admin)

    def wait_for_default_service_account(self, namespace: str) -> None:
        wait_until(lambda: self.kubectl.run("get", "serviceaccount", "default", "-n",
                                            namespace, check=False).returncode == 0,
                   f"the default service account of {namespace}", timeout=60)


@contextlib.contextmanager
def fresh_cluster(root: Path) -> Iterator[Cluster]:
    """A control plane of its own, in a network namespace of its own."""
    if not can_run():
        pytest.skip("the real-cluster tier makes a network namespace: run it as root")
    netns = Namespace()
    try:
        plane = ControlPlane(netns, root, etcd=built("etcd"), kubernetes=built("kubernetes"))
        with plane.running():
            yield Cluster(netns, plane)
    finally:
        netns.close()


@pytest.fixture(scope="package")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    with fresh_cluster(tmp_path_factory.mktemp("control-plane")) as made:
        yield made


def render_chart(*values: str) -> list[dict[str, Any]]:
    """The chart's objects, with ``values`` (``--set`` arguments)."""
    out = subprocess.run([str(built("helm")), "template", "reports-pipeline", str(CHART),
                          "--namespace", RELEASE_NAMESPACE,
                          *(f"--set={v}" for v in values)], capture_output=True, text=True,
                         check=True).stdout
    return [doc for doc in yaml.safe_load_all(out) if doc]


class System:
    """The system installed in the cluster: the chart's objects, and the
    frontend (with the whole pipeline) as `up` on the namespace's node
    address, where the chart's Service routes."""

    def __init__(self, cluster: Cluster, root: Path, *, register: bool = True):
        self.cluster = cluster
        self.root = root
        self.data_dir = root / "data"
        #: whether the chart registers its APIServices (or keeps them in a ConfigMap)
        self.register = register
        kubectl = cluster.kubectl
        docs = render_chart(f"apiService.register={str(register).lower()}")
        kubectl.run("create", "namespace", RELEASE_NAMESPACE, check=False)
        # everything but the workloads: the frontend and worker run here as `up`
        for doc in docs:  # as helm install places them
            if doc["kind"] not in CLUSTER_SCOPED:
                doc["metadata"].setdefault("namespace", RELEASE_NAMESPACE)
        kubectl.apply([d for d in docs if d["kind"] not in ("Deployment", "StatefulSet")])
        secret = next(d for d in docs if d["kind"] == "Secret"
                      and d["metadata"]["name"].endswith("-tls"))
        service = next(d for d in docs if d["kind"] == "Service")
        frontend = next(d for d in docs if d["kind"] == "Deployment"
                        and d["metadata"]["name"].endswith("-frontend"))
        self.chart_args = frontend["spec"]["template"]["spec"]["containers"][0]["args"]
        self.service_account = next(d for d in docs if d["kind"] == "ServiceAccount")[
            "metadata"]["name"]
        self.cert, self.key = root / "tls.crt", root / "tls.key"
        self.cert.write_bytes(base64.b64decode(secret["data"]["tls.crt"]))
        self.key.write_bytes(base64.b64decode(secret["data"]["tls.key"]))
        #: the CA of the serving certificate (the APIServices' caBundle)
        self.ca = base64.b64decode(secret["data"]["ca.crt"])
        #: the name the serving certificate carries (the Service's)
        self.service_host = f"{service['metadata']['name']}.{RELEASE_NAMESPACE}.svc"
        port_name = service["spec"]["ports"][0]["name"]
        kubectl.apply({
            "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
            "metadata": {"name": f"{service['metadata']['name']}-node",
                         "namespace": RELEASE_NAMESPACE,
                         "labels": {"kubernetes.io/service-name": service["metadata"]["name"],
                                    "endpointslice.kubernetes.io/managed-by": "tests"}},
            "addressType": "IPv4",
            "ports": [{"name": port_name, "port": FRONTEND_PORT, "protocol": "TCP"}],
            "endpoints": [{"addresses": [NODE_ADDRESS], "conditions": {"ready": True}}]})
        # what a pod of the frontend has: its service account's token, and the
        # aggregator's front-proxy CA that kube-apiserver publishes
        token = kubectl.run("create", "token", self.service_account, "-n", RELEASE_NAMESPACE,
                            "--duration=48h").stdout.strip()
        self.reviews = kubeconfig(root / "service-account.kubeconfig",
                                  server=cluster.plane.server, ca=cluster.plane.ca.pem,
                                  token=token)
        front_proxy = kubectl.json("get", "configmap", "-n", "kube-system",
                                   "extension-apiserver-authentication")
        self.front_proxy_ca = root / "front-proxy-ca.crt"
        self.front_proxy_ca.write_text(front_proxy["data"]["requestheader-client-ca-file"])
        self.process: Process | None = None

    def argv(self) -> list[str]:
        """The chart's frontend arguments, for `up` on this machine: its files
        where the pod mounts them, the front-proxy CA that the pod reads from
        the cluster in a file, the pod's service account in a kubeconfig."""
        files = {"/tls/tls.crt": str(self.cert), "/tls/tls.key": str(self.key),
                 "in-cluster": str(self.reviews)}
        args = iter(self.chart_args)
        assert next(args) == "serve"
        argv = [str(BIN / "reports-pipeline"), "up", "--data-dir", str(self.data_dir),
                "--host", NODE_ADDRESS]
        for arg in args:
            if arg == "--port":
                argv += [arg, str(FRONTEND_PORT)]
                next(args)
            elif arg == "--health-port":  # the kubelet's probes: no kubelet here
                next(args)
            elif arg == "--front-proxy-ca-from-cluster":
                argv += ["--requestheader-client-ca-file", str(self.front_proxy_ca)]
            else:
                argv.append(files.get(arg, arg))
        return argv

    def start(self) -> None:
        log = self.root / "up.log"
        offset = log.stat().st_size if log.exists() else 0
        self.process = Process(self.cluster.netns, self.argv(), log,
                               env={"REPORTS_TOPIC_PREFIX": "cluster"})
        try:
            wait_until(lambda: "is ready" in log.read_text(errors="replace")[offset:],
                       "reports-pipeline up ready", timeout=180, alive=[self.process])
            if self.register:
                self.wait_available()
        except BaseException:
            self.stop()  # nothing of a failed start outlives it
            raise

    def available(self) -> bool:
        for name in GROUP_VERSIONS:
            status = self.cluster.kubectl.json("get", "apiservice", name).get("status", {})
            if not any(c["type"] == "Available" and c["status"] == "True"
                       for c in status.get("conditions", [])):
                return False
        return True

    def proxied(self) -> bool:
        """Whether kube-apiserver proxies every group version to the frontend.
        Its proxy learns an APIService's Available condition from an informer
        of its own, a moment after the condition shows: a request in between
        is refused with 503."""
        return all(self.cluster.kubectl.run("get", "--raw", discovery_path(name),
                                            check=False).returncode == 0
                   for name in GROUP_VERSIONS)

    def wait_available(self, timeout: float = 60) -> float:
        started = time.monotonic()
        wait_until(lambda: self.available() and self.proxied(),
                   "every APIService Available and proxied", timeout=timeout,
                   every=0.25, alive=[self.process] if self.process else [])
        return time.monotonic() - started

    def output(self) -> str:
        return (self.root / "up.log").read_text(errors="replace")

    def stop(self) -> int | None:
        if self.process is None:
            return None
        code = self.process.stop(timeout=60)
        self.process = None
        return code


@pytest.fixture(scope="module")
def system(cluster: Cluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[System]:
    """A fresh store, installed; each test module has its own."""
    installed = System(cluster, tmp_path_factory.mktemp("system"))
    try:
        installed.start()
        yield installed
    finally:
        installed.stop()
