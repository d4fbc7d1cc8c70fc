"""Kyverno's admission controller and reports controller, built from Kyverno's
module, run out of cluster inside the network namespace: each with its own
service account's token and the RBAC of Kyverno's release manifest
(``config/install-latest-testing.yaml`` of the pinned module), Kyverno's
policy CRDs only (none of the report CRDs: the system serves those), the
admission controller's webhooks by URL (``--serverIP``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from tests.cluster import binaries
from tests.cluster.controlplane import NODE_ADDRESS, Process, kubeconfig, wait_until

NAMESPACE = "kyverno"
WEBHOOK_PORT = 9443
#: the groups whose CRDs Kyverno's manifest carries and the system serves
SERVED_GROUPS = ("wgpolicyk8s.io", "reports.kyverno.io", "openreports.io")
MODULE = "github.com/kyverno/kyverno"


def release_manifest() -> list[dict[str, Any]]:
    source = binaries.module_source("kyverno", MODULE)
    text = (source / "config" / "install-latest-testing.yaml").read_text()
    return [doc for doc in yaml.safe_load_all(text) if doc]


def report_crds() -> list[dict[str, Any]]:
    """The report CRDs a cluster has with Kyverno installed as its release
    ships it (wgpolicyk8s.io, reports.kyverno.io), and openreports.io's from
    the reports-api module Kyverno pins."""
    crds = [d for d in release_manifest() if d["kind"] == "CustomResourceDefinition"
            and d["spec"]["group"] in SERVED_GROUPS]
    source = binaries.module_source("kyverno", "github.com/openreports/reports-api")
    for name in ("reports", "clusterreports"):
        crds.append(yaml.safe_load((source / "config" / "crd" / f"openreports.io_{name}.yaml"
                                    ).read_text()))
    return crds


def _container(deployment: dict[str, Any]) -> dict[str, Any]:
    containers = deployment["spec"]["template"]["spec"]["containers"]
    return next(c for c in containers if c["name"] in ("kyverno", "controller"))


def _env(container: dict[str, Any], pod: str) -> dict[str, str]:
    env = {}
    for var in container.get("env", []):
        if "value" in var:
            env[var["name"]] = var["value"]
        elif var.get("valueFrom", {}).get("fieldRef", {}).get("fieldPath") == \
                "metadata.namespace":
            env[var["name"]] = NAMESPACE
        elif var.get("valueFrom", {}).get("fieldRef", {}).get("fieldPath") == "metadata.name":
            env[var["name"]] = pod
    return env


def _args(container: dict[str, Any], overrides: dict[str, str]) -> list[str]:
    """The manifest's arguments with ``overrides`` (flag name to value) in place."""
    args = []
    for arg in container.get("args", []):
        name = arg.lstrip("-").split("=", 1)[0]
        if name not in overrides:
            args.append(arg)
    return args + [f"--{k}={v}" for k, v in overrides.items()]


class Kyverno:
    """Kyverno installed in the cluster (RBAC, config, policy CRDs) and its
    two controllers running."""

    def __init__(self, cluster: Any, root: Path, *, with_report_crds: bool = False):
        self.cluster = cluster
        self.root = root
        self.docs = release_manifest()
        self.processes: dict[str, Process] = {}
        kubectl = cluster.kubectl
        installed = [d for d in self.docs if d["kind"] not in ("Deployment", "Service")
                     and not (d["kind"] == "CustomResourceDefinition"
                              and d["spec"]["group"] in SERVED_GROUPS)]
        if with_report_crds:  # as a cluster has them before the system comes
            installed += report_crds()
        crds = [d for d in installed if d["kind"] == "CustomResourceDefinition"]
        kubectl.apply([d for d in installed if d["kind"] == "Namespace"])
        kubectl.run("apply", "--server-side", "-f", "-", input=yaml.safe_dump_all(crds))
        kubectl.run("wait", "--for=condition=Established", "--timeout=60s",
                    *[f"crd/{d['metadata']['name']}" for d in crds])
        kubectl.apply([d for d in installed if d["kind"] not in (
            "Namespace", "CustomResourceDefinition")])

    def _deployment(self, name: str) -> dict[str, Any]:
        return next(d for d in self.docs if d["kind"] == "Deployment"
                    and d["metadata"]["name"] == name)

    def _start(self, deployment: str, binary: str, overrides: dict[str, str]) -> None:
        container = _container(self._deployment(deployment))
        account = self._deployment(deployment)["spec"]["template"]["spec"][
            "serviceAccountName"]
        plane = self.cluster.plane
        token = self.cluster.kubectl.run("create", "token", account, "-n", NAMESPACE,
                                         "--duration=48h").stdout.strip()
        config = kubeconfig(self.root / f"{deployment}.kubeconfig", server=plane.server,
                            ca=plane.ca.pem, token=token)
        argv = [str(binaries.binaries("kyverno") / binary), f"--kubeconfig={config}",
                *_args(container, overrides)]
        self.processes[deployment] = Process(
            self.cluster.netns, argv, self.root / f"{deployment}.log",
            env=_env(container, f"{deployment}-local"), cwd=self.root)

    def start(self, *, openreports: bool = False, scan_interval: str = "20s") -> None:
        self._start("kyverno-admission-controller", "kyverno", {
            "serverIP": f"{NODE_ADDRESS}:{WEBHOOK_PORT}",
            "webhookServerPort": str(WEBHOOK_PORT), "metricsPort": "8000",
            "disableMetrics": "true", "generateValidatingAdmissionPolicy": "false"})
        self._start("kyverno-reports-controller", "reports-controller", {
            "openreportsEnabled": str(openreports).lower(),
            "reportsCRDsSanityChecks": "false", "backgroundScan": "true",
            "backgroundScanInterval": scan_interval, "disableMetrics": "true",
            "metricsPort": "8001"})
        wait_until(self._webhooks_ready, "Kyverno's webhooks registered", timeout=180,
                   every=1, alive=list(self.processes.values()))

    def _webhooks_ready(self) -> bool:
        kubectl = self.cluster.kubectl
        listed = kubectl.run("get", "validatingwebhookconfigurations", "-o", "name",
                             check=False).stdout
        # its serving certificate, which it makes itself once it leads
        pair = kubectl.run("get", "secret", "-n", NAMESPACE,
                           "kyverno-svc.kyverno.svc.kyverno-tls-pair", check=False)
        return "kyverno-resource-validating-webhook-cfg" in listed and pair.returncode == 0

    def stop(self) -> None:
        for process in self.processes.values():
            process.stop()
        self.processes = {}

    def logs(self) -> str:
        return "\n".join(f"--- {name}\n{p.tail(60)}" for name, p in self.processes.items())
