"""The Helm chart installs with ``helm install`` alone: rendered with ``helm
template`` for several value sets, every manifest is valid against the
Kubernetes schemas (kubernetes-validate's copy of them), the generated serving
certificate is signed by the CA every APIService trusts, and ``helm lint`` is
clean. helm itself is built from the Go module proxy when it is missing."""

from __future__ import annotations

import base64
import re
import shlex
import subprocess
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml
from cryptography import x509
from cryptography.hazmat.primitives.asymmetric import ec, padding, rsa
from cryptography.x509.oid import ExtensionOID

from tests.cluster import binaries

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "deploy" / "helm" / "reports-pipeline"
#: the oldest Kubernetes the chart is checked against, and the newest schemas
KUBERNETES = ("1.30", kubernetes_validate.latest_version())
NAMESPACE = "reports"


@pytest.fixture(scope="module")
def helm() -> str:
    return binaries.helm()


def render(helm: str, *values: str) -> list[dict[str, Any]]:
    sets = [arg for value in values for arg in ("--set", value)]
    out = subprocess.run([helm, "template", "rp", str(CHART), "--namespace", NAMESPACE, *sets],
                         capture_output=True, text=True, check=True).stdout
    return [doc for doc in yaml.safe_load_all(out) if doc]


VALUE_SETS = {
    "defaults": (),
    "with Kafka": ("kafka.deploy=true", "frontend.replicas=3", "worker.replicas=2",
                   "metrics.serviceMonitor.enabled=true", "dashboard.enabled=true"),
    "own certificate and secrets": ("tls.existingSecret=reports-tls", "tls.caBundle=Y2E=",
                                    "clickhouse.existingSecret=clickhouse-url",
                                    "image.repository=registry.example/reports-pipeline",
                                    "image.tag=0.1.0-rc1", "dashboard.enabled=true",
                                    "dashboard.existingSecret=dashboard-token"),
}


@pytest.fixture(scope="module", params=list(VALUE_SETS))
def rendered(request: pytest.FixtureRequest, helm: str) -> Iterator[list[dict[str, Any]]]:
    yield render(helm, *VALUE_SETS[request.param])


def test_every_manifest_is_valid_kubernetes(rendered: list[dict[str, Any]]) -> None:
    assert rendered
    for doc in rendered:
        if doc["apiVersion"].startswith("monitoring.coreos.com/"):
            continue  # the Prometheus Operator's CRD, not a Kubernetes schema
        for version in KUBERNETES:
            try:
                kubernetes_validate.validate(doc, version, strict=True)
            except kubernetes_validate.ValidationError as err:
                pytest.fail(f"{doc['kind']} {doc['metadata']['name']} on {version}:"
                            f" {err.message} at {list(err.path)}")


def by_kind(docs: list[dict[str, Any]], kind: str) -> dict[str, dict[str, Any]]:
    return {d["metadata"]["name"]: d for d in docs if d["kind"] == kind}


def verify_signed(cert: x509.Certificate, ca: x509.Certificate) -> None:
    key = ca.public_key()
    assert cert.signature_hash_algorithm is not None
    if isinstance(key, rsa.RSAPublicKey):
        key.verify(cert.signature, cert.tbs_certificate_bytes, padding.PKCS1v15(),
                   cert.signature_hash_algorithm)
    else:
        assert isinstance(key, ec.EllipticCurvePublicKey)
        key.verify(cert.signature, cert.tbs_certificate_bytes,
                   ec.ECDSA(cert.signature_hash_algorithm))


def test_the_generated_certificate_is_what_the_apiservices_trust(helm: str) -> None:
    docs = render(helm)
    secrets = by_kind(docs, "Secret")
    tls = secrets["reports-pipeline-tls"]
    assert tls["type"] == "kubernetes.io/tls"
    cert = x509.load_pem_x509_certificate(base64.b64decode(tls["data"]["tls.crt"]))
    names = cert.extensions.get_extension_for_oid(
        ExtensionOID.SUBJECT_ALTERNATIVE_NAME).value.get_values_for_type(x509.DNSName)
    # the name the aggregator dials: <service>.<namespace>.svc
    assert f"reports-pipeline.{NAMESPACE}.svc" in names
    apiservices = by_kind(docs, "APIService")
    assert set(apiservices) == {"v1alpha2.wgpolicyk8s.io", "v1.reports.kyverno.io",
                                "v1alpha1.openreports.io"}
    for apiservice in apiservices.values():
        ca = x509.load_pem_x509_certificate(base64.b64decode(apiservice["spec"]["caBundle"]))
        verify_signed(cert, ca)
        assert apiservice["spec"]["service"] == {"name": "reports-pipeline",
                                                 "namespace": NAMESPACE, "port": 443}
        # nothing keeps it after uninstall
        assert "helm.sh/resource-policy" not in apiservice["metadata"].get("annotations", {})
    # the frontend serves that certificate, reads the front-proxy CA from the
    # cluster, and is ready only while serving
    frontend = by_kind(docs, "Deployment")["reports-pipeline-frontend"]["spec"]["template"]
    [container] = frontend["spec"]["containers"]
    assert "--front-proxy-ca-from-cluster" in container["args"]
    args = container["args"]
    for flag in ("--authentication-kubeconfig", "--authorization-kubeconfig"):
        assert args[args.index(flag) + 1] == "in-cluster"
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
    [tls_volume] = [v for v in frontend["spec"]["volumes"] if v["name"] == "tls"]
    assert tls_volume["secret"]["secretName"] == "reports-pipeline-tls"
    # and may read that CA
    reader = by_kind(docs, "RoleBinding")["reports-pipeline:auth-reader"]
    assert reader["metadata"]["namespace"] == "kube-system"
    assert reader["roleRef"]["name"] == "extension-apiserver-authentication-reader"


def test_each_render_issues_a_new_serving_certificate(helm: str) -> None:
    first, second = (by_kind(render(helm), "Secret")["reports-pipeline-tls"] for _ in range(2))
    assert first["data"]["tls.crt"] != second["data"]["tls.crt"]


def test_the_service_monitor_is_optional(helm: str) -> None:
    assert not by_kind(render(helm), "ServiceMonitor")
    docs = render(helm, "metrics.serviceMonitor.enabled=true")
    [monitor] = by_kind(docs, "ServiceMonitor").values()
    assert monitor["spec"]["endpoints"][0]["path"] == "/metrics"
    service = by_kind(docs, "Service")["reports-pipeline-metrics"]
    assert service["spec"]["ports"][0]["targetPort"] == "probes"


def test_the_dashboard_is_optional(helm: str) -> None:
    assert not any("dashboard" in name for name in by_kind(render(helm), "Deployment"))
    docs = render(helm, "dashboard.enabled=true")
    deployment = by_kind(docs, "Deployment")["reports-pipeline-dashboard"]
    [container] = deployment["spec"]["template"]["spec"]["containers"]
    assert container["args"][0] == "dashboard"
    env = {e["name"]: e for e in container["env"]}
    assert env["REPORTS_DASHBOARD_TOKEN"]["valueFrom"]["secretKeyRef"] == {
        "name": "rp-dashboard", "key": "token"}
    assert "CLICKHOUSE_URL" in env
    secret = by_kind(docs, "Secret")["rp-dashboard"]
    assert len(base64.b64decode(secret["data"]["token"])) == 32
    service = by_kind(docs, "Service")["reports-pipeline-dashboard"]
    assert service["spec"]["ports"][0]["targetPort"] == "http"
    # an own Secret: used as given, none made
    own = render(helm, "dashboard.enabled=true", "dashboard.existingSecret=mine")
    assert "rp-dashboard" not in by_kind(own, "Secret")


def test_an_own_certificate_is_used_as_given(helm: str) -> None:
    docs = render(helm, *VALUE_SETS["own certificate and secrets"])
    assert not by_kind(docs, "Secret")
    for apiservice in by_kind(docs, "APIService").values():
        assert apiservice["spec"]["caBundle"] == "Y2E="
    frontend = by_kind(docs, "Deployment")["reports-pipeline-frontend"]["spec"]["template"]
    [tls_volume] = [v for v in frontend["spec"]["volumes"] if v["name"] == "tls"]
    assert tls_volume["secret"]["secretName"] == "reports-tls"
    [container] = frontend["spec"]["containers"]
    assert container["image"] == "registry.example/reports-pipeline:0.1.0-rc1"


def test_an_own_certificate_without_its_ca_is_refused(helm: str) -> None:
    done = subprocess.run([helm, "template", "rp", str(CHART), "--set",
                           "tls.existingSecret=reports-tls"], capture_output=True, text=True)
    assert done.returncode != 0
    assert "tls.existingSecret needs tls.caBundle" in done.stderr


def test_the_default_image_is_the_projects_version(helm: str) -> None:
    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    for deployment in by_kind(render(helm), "Deployment").values():
        [container] = deployment["spec"]["template"]["spec"]["containers"]
        assert container["image"] == f"reports-pipeline:{version}"


def test_helm_lint_is_clean(helm: str) -> None:
    for values in VALUE_SETS.values():
        sets = [arg for value in values for arg in ("--set", value)]
        done = subprocess.run([helm, "lint", "--strict", str(CHART), *sets],
                              capture_output=True, text=True)
        assert done.returncode == 0, done.stdout + done.stderr
        assert "[WARNING]" not in done.stdout and "[ERROR]" not in done.stdout, done.stdout


def test_readmes_install_command_renders(helm: str) -> None:
    """README's `helm install`, as `helm template` (no cluster here)."""
    readme = (ROOT / "README.md").read_text()
    helm_part = readme[readme.index("### Helm"):readme.index("### Kyverno")]
    [block] = re.findall(r"```sh\n(.*?)```", helm_part, flags=re.S)
    command = shlex.split(block.replace("\\\n", " ").replace("$REGISTRY", "registry.example"))
    assert command[:2] == ["helm", "install"]
    args = [str(ROOT / a) if a.startswith("deploy/") else a for a in command[2:]]
    args = [a for a in args if a != "--create-namespace"]
    done = subprocess.run([helm, "template", *args], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    docs = [d for d in yaml.safe_load_all(done.stdout) if d]
    [container] = by_kind(docs, "Deployment")["reports-pipeline-frontend"]["spec"]["template"][
        "spec"]["containers"]
    assert container["image"].startswith("registry.example/reports-pipeline:")


def test_the_topics_replication_is_a_value(helm: str) -> None:
    for values, factor, isr in (((), "0", "0"),
                                (("kafka.replicationFactor=3", "kafka.minInsyncReplicas=2"),
                                 "3", "2")):
        checked = []
        for name, deployment in by_kind(render(helm, *values), "Deployment").items():
            if "dashboard" in name or "kafka" in name:
                continue
            checked.append(name)
            for container in deployment["spec"]["template"]["spec"]["containers"]:
                env = {e["name"]: e.get("value") for e in container["env"]}
                assert (env["REPORTS_REPLICATION_FACTOR"], env["REPORTS_MIN_INSYNC_REPLICAS"]) \
                    == (factor, isr), name
        assert len(checked) >= 2, checked  # the frontend's and the worker's
