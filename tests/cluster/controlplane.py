"""A real control plane inside a network namespace of the test's own: etcd,
kube-apiserver (aggregation layer on, routing to EndpointSlice addresses) and
kube-controller-manager (namespace controller, garbage collector, service
accounts, role aggregation), built by ``tests.cluster.binaries``.

The namespace has its loopback and two addresses of a private range on it:
``API_ADDRESS`` (kube-apiserver's advertised address) and ``NODE_ADDRESS``
(the frontend's and Kyverno's: the aggregator refuses loopback endpoints).
Every process runs in it, and so does every client the tests start
(``Namespace.command``): no traffic leaves it."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import yaml
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from bench.pki import Authority, key_pem, kubeconfig
from pipeline.runtime.processes import die_with_parent
from tests.e2e.conftest import kubectl_binary

API_ADDRESS = "10.200.0.2"
NODE_ADDRESS = "10.200.0.1"
API_PORT = 6443
ETCD_PORT = 2379


class Namespace:
    """A network namespace made with ``ip netns``; removed on ``close``."""

    def __init__(self) -> None:
        self.name = f"rp-{uuid.uuid4().hex[:8]}"
        subprocess.run(["ip", "netns", "add", self.name], check=True)
        try:
            for command in (["ip", "link", "set", "lo", "up"],
                            ["ip", "addr", "add", f"{NODE_ADDRESS}/32", "dev", "lo"],
                            ["ip", "addr", "add", f"{API_ADDRESS}/32", "dev", "lo"]):
                subprocess.run(self.command(command), check=True)
        except BaseException:
            self.close()
            raise

    def command(self, argv: Sequence[str]) -> list[str]:
        """``argv`` run inside the namespace."""
        return ["nsenter", f"--net=/run/netns/{self.name}", "--", *argv]

    def close(self) -> None:
        subprocess.run(["ip", "netns", "delete", self.name], check=False)


class Process:
    """A long-running program in the namespace, its output in a log file."""

    def __init__(self, netns: Namespace, argv: Sequence[str], log: Path, *,
                 env: dict[str, str] | None = None, cwd: Path | None = None):
        self.argv = list(argv)
        self.log = log
        # the child writes the log through a descriptor of its own: this
        # process keeps none open, whether the program starts or not
        with open(log, "ab") as out:
            self.proc = subprocess.Popen(netns.command(argv), stdout=out,
                                         stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                         env={**os.environ, **(env or {})}, cwd=cwd,
                                         start_new_session=True, preexec_fn=die_with_parent())

    def alive(self) -> bool:
        return self.proc.poll() is None

    def tail(self, lines: int = 40) -> str:
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])

    def stop(self, timeout: float = 20) -> int | None:
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        return self.proc.returncode


def wait_until(check: Callable[[], bool], what: str, *, timeout: float = 60,
               every: float = 0.2, alive: Sequence[Process] = ()) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        for process in alive:
            if not process.alive():
                raise AssertionError(f"{what}: {process.argv[0]} exited:\n{process.tail()}")
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not within {timeout:g} s")
        time.sleep(every)


# -- the control plane -----------------------------------------------------

class ControlPlane:
    """etcd, kube-apiserver and kube-controller-manager in ``netns``, their
    files under ``root``. ``admin`` is a system:masters kubeconfig."""

    def __init__(self, netns: Namespace, root: Path, *, etcd: Path, kubernetes: Path):
        self.netns = netns
        self.root = root
        self.pki = root / "pki"
        self.pki.mkdir(parents=True)
        self.server = f"https://127.0.0.1:{API_PORT}"
        self.ca = Authority(self.pki, "kubernetes-ca")
        self.front_proxy_ca = Authority(self.pki, "front-proxy-ca")
        self.processes: list[Process] = []
        self._etcd_binary = etcd / "etcd"
        self._kubernetes = kubernetes
        admin_cert, admin_key = self.ca.issue("admin", organizations=["system:masters"])
        self.admin = kubeconfig(root / "admin.kubeconfig", server=self.server, ca=self.ca.pem,
                                cert=admin_cert, key=admin_key)

    def start(self) -> None:
        self.etcd = self._start_etcd()
        self.apiserver = self._start_apiserver()
        self.controller_manager = self._start_controller_manager()

    def _start_etcd(self) -> Process:
        data = self.root / "etcd"
        url = f"http://127.0.0.1:{ETCD_PORT}"
        etcd = Process(self.netns, [
            str(self._etcd_binary), "--data-dir", str(data), "--listen-client-urls", url,
            "--advertise-client-urls", url, "--listen-peer-urls", "http://127.0.0.1:2380",
            "--initial-advertise-peer-urls", "http://127.0.0.1:2380",
            "--initial-cluster", "default=http://127.0.0.1:2380",
            "--listen-metrics-urls", "http://127.0.0.1:2381",
            "--quota-backend-bytes", str(2 * 1024**3), "--log-level", "warn"],
            self.root / "etcd.log")
        self.processes.append(etcd)
        return etcd

    def _start_apiserver(self) -> Process:
        pki = self.pki
        serving = self.ca.issue("kube-apiserver", hosts=[
            "127.0.0.1", API_ADDRESS, "10.96.0.1", "localhost", "kubernetes",
            "kubernetes.default", "kubernetes.default.svc"])
        kubelet_client = self.ca.issue("kube-apiserver-kubelet-client",
                                       organizations=["system:masters"])
        proxy_client = self.front_proxy_ca.issue("front-proxy-client")
        sa_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        (pki / "sa.key").write_bytes(key_pem(sa_key))
        (pki / "sa.pub").write_bytes(sa_key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo))
        # the reviews the frontend asks for, as they arrive (tests read them)
        self.audit_log = self.root / "audit.log"
        policy = self.root / "audit-policy.yaml"
        policy.write_text(yaml.safe_dump({
            "apiVersion": "audit.k8s.io/v1", "kind": "Policy", "omitStages": ["RequestReceived"],
            "rules": [{"level": "Request", "resources": [{
                "group": "authorization.k8s.io", "resources": ["subjectaccessreviews"]}]},
                      {"level": "None"}]}))
        apiserver = Process(self.netns, [
            str(self._kubernetes / "kube-apiserver"),
            f"--etcd-servers=http://127.0.0.1:{ETCD_PORT}",
            f"--secure-port={API_PORT}", "--bind-address=0.0.0.0",
            f"--advertise-address={API_ADDRESS}",
            f"--tls-cert-file={serving[0]}", f"--tls-private-key-file={serving[1]}",
            f"--client-ca-file={self.ca.file}",
            f"--kubelet-client-certificate={kubelet_client[0]}",
            f"--kubelet-client-key={kubelet_client[1]}",
            "--service-account-issuer=https://kubernetes.default.svc",
            f"--service-account-key-file={pki / 'sa.pub'}",
            f"--service-account-signing-key-file={pki / 'sa.key'}",
            "--service-cluster-ip-range=10.96.0.0/16",
            "--authorization-mode=RBAC",
            # the aggregation layer, as kubeadm sets it up
            f"--requestheader-client-ca-file={self.front_proxy_ca.file}",
            "--requestheader-allowed-names=front-proxy-client",
            "--requestheader-username-headers=X-Remote-User",
            "--requestheader-group-headers=X-Remote-Group",
            "--requestheader-extra-headers-prefix=X-Remote-Extra-",
            "--requestheader-uid-headers=X-Remote-Uid",
            f"--proxy-client-cert-file={proxy_client[0]}",
            f"--proxy-client-key-file={proxy_client[1]}",
            "--enable-aggregator-routing=true",
            f"--audit-policy-file={policy}", f"--audit-log-path={self.audit_log}",
            "--audit-log-format=json", "--audit-log-mode=blocking",
            "--profiling=false", "--v=0"],
            self.root / "kube-apiserver.log")
        self.processes.append(apiserver)
        wait_until(self._ready, "kube-apiserver ready", timeout=120, alive=[apiserver, self.etcd])
        return apiserver

    def _ready(self) -> bool:
        result = subprocess.run(self.netns.command(
            [kubectl_binary(), "--kubeconfig", str(self.admin), "--request-timeout=2s",
             "get", "--raw", "/readyz"]), capture_output=True, text=True, check=False)
        return result.stdout.strip() == "ok"

    def _start_controller_manager(self) -> Process:
        cert, key = self.ca.issue("system:kube-controller-manager")
        config = kubeconfig(self.root / "controller-manager.kubeconfig", server=self.server,
                            ca=self.ca.pem, cert=cert, key=key)
        manager = Process(self.netns, [
            str(self._kubernetes / "kube-controller-manager"), f"--kubeconfig={config}",
            f"--authentication-kubeconfig={config}", f"--authorization-kubeconfig={config}",
            "--bind-address=127.0.0.1", "--secure-port=10257",
            "--controllers=namespace-controller,garbage-collector-controller,serviceaccount-controller,"
            "serviceaccount-token-controller,clusterrole-aggregation-controller",
            f"--service-account-private-key-file={self.pki / 'sa.key'}",
            f"--root-ca-file={self.ca.file}", "--use-service-account-credentials=true",
            "--leader-elect=false", "--concurrent-gc-syncs=5",
            "--namespace-sync-period=10s", "--v=0"],
            self.root / "kube-controller-manager.log")
        self.processes.append(manager)
        return manager

    def access_reviews(self) -> list[dict[str, Any]]:
        """Every SubjectAccessReview's spec so far, from the audit log."""
        if not self.audit_log.exists():
            return []
        events = [json.loads(line) for line in self.audit_log.read_text().splitlines() if line]
        return [e["requestObject"]["spec"] for e in events
                if e.get("stage") == "ResponseComplete" and "requestObject" in e]

    def stop(self) -> None:
        for process in reversed(self.processes):
            process.stop()

    @contextlib.contextmanager
    def running(self) -> Iterator[ControlPlane]:
        try:
            self.start()
            yield self
        finally:
            self.stop()
