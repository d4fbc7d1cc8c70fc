"""The benchmark's etcd-CRD baseline serves the report CRDs exactly as the
pinned Kyverno's release manifest ships them."""

from __future__ import annotations

import yaml

from bench.baseline import CRDS
from tests.cluster.kyverno import SERVED_GROUPS, release_manifest


def test_the_baseline_crds_are_kyvernos() -> None:
    shipped = [d for d in release_manifest() if d["kind"] == "CustomResourceDefinition"
               and d["spec"]["group"] in SERVED_GROUPS]
    ours = [d for d in yaml.safe_load_all(CRDS.read_text()) if d]
    assert ours == shipped
    assert {d["spec"]["names"]["kind"] for d in ours} >= {"PolicyReport", "EphemeralReport"}
