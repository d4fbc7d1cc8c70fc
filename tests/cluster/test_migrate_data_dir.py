"""``migrate in|out --data-dir`` against an ``up`` started with
``--tls-cert-file`` (the out-of-cluster setup behind APIServices): the store
is reached with ``DATA/kubeconfig``, which trusts the serving certificate
itself (a partial chain, as kubectl trusts it) under the name it carries
(tls-server-name). On a control plane of its own, whose reports live in
CRDs."""

from __future__ import annotations

import base64
import subprocess
from collections.abc import Iterator
from typing import Any

import pytest
import yaml

from apiserver.access.tls import certificate_names
from bench.baseline import CRDS
from tests.cluster.conftest import Cluster, Kubectl, System, fresh_cluster
from tests.cluster.test_migrate import summary
from tests.e2e.conftest import BIN

pytestmark = pytest.mark.cluster
NAMESPACE = "data-dir"
REPORTS = 12


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    with fresh_cluster(tmp_path_factory.mktemp("data-dir-plane")) as made:
        yield made


def report(name: str, outcome: str) -> dict[str, Any]:
    return {"apiVersion": "wgpolicyk8s.io/v1alpha2", "kind": "PolicyReport",
            "metadata": {"name": name, "namespace": NAMESPACE, "labels": {"by": "hand"}},
            "results": [{"policy": "p", "rule": "r", "result": outcome, "source": "by-hand",
                         "scored": True, "message": f"{name} {outcome}",
                         "timestamp": {"seconds": 1767225600, "nanos": 0}}],
            "summary": {outcome: 1}}


def migrate(cluster: Cluster, system: System, direction: str
            ) -> dict[str, dict[str, int]]:
    done = subprocess.run(cluster.netns.command([
        str(BIN / "reports-pipeline"), "migrate", direction, "--kubeconfig",
        str(cluster.plane.admin), "--data-dir", str(system.data_dir)]),
        capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, f"migrate {direction}: {done.stderr}\n{done.stdout}"
    return summary(done.stdout)


def contents(kubectl: Kubectl) -> dict[str, Any]:
    return {o["metadata"]["name"]: (o["metadata"].get("labels"), o["results"], o["summary"])
            for o in kubectl.json("get", "policyreports", "-n", NAMESPACE)["items"]}


@pytest.mark.timeout(900)
def test_migrate_with_the_kubeconfig_of_an_up_serving_a_given_certificate(
        cluster: Cluster, tmp_path_factory: pytest.TempPathFactory) -> None:
    kubectl = cluster.kubectl
    crds = [d for d in yaml.safe_load_all(CRDS.read_text()) if d]
    kubectl.run("apply", "--server-side", "-f", "-", input=yaml.safe_dump_all(crds))
    kubectl.run("wait", "--for=condition=Established", "--timeout=60s",
                *[f"crd/{d['metadata']['name']}" for d in crds])
    kubectl.run("create", "namespace", NAMESPACE)
    kubectl.apply([report(f"r-{i}", "fail" if i % 3 else "pass") for i in range(REPORTS)])
    in_crds = contents(kubectl)

    system = System(cluster, tmp_path_factory.mktemp("system"), register=False)
    try:
        system.start()
        assert "--tls-cert-file" in system.argv()
        config = yaml.safe_load((system.data_dir / "kubeconfig").read_text())
        served = config["clusters"][0]["cluster"]
        # the kubeconfig trusts the serving certificate itself, by a name it carries
        assert served["tls-server-name"] in certificate_names(system.cert)
        assert served["certificate-authority-data"] == base64.b64encode(
            system.cert.read_bytes()).decode()
        store = Kubectl(cluster.netns, system.data_dir / "kubeconfig")

        moved_in = migrate(cluster, system, "in")
        assert moved_in["policyreports"]["copied"] == REPORTS, moved_in
        assert contents(store) == in_crds

        store.apply(report("made-in-the-store", "fail"))
        moved_out = migrate(cluster, system, "out")
        assert moved_out["policyreports"]["copied"] == 1, moved_out
        assert contents(kubectl) == contents(store)
    except AssertionError as err:
        raise AssertionError(f"{err}\n--- up\n{system.process.tail(60) if system.process else ''}"
                             ) from err
    finally:
        system.stop()
