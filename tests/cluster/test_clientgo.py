"""A client-go v0.37 program (``modules/clientgo``) does what controllers do
to the report API, through kube-apiserver's aggregation layer and, for
discovery, at the frontend itself: one round trip per discovery document,
concurrent patches without a resourceVersion that all apply, server-side
apply conflicts between managers, and a paged list that is one snapshot
while its objects change."""

from __future__ import annotations

import json
import subprocess

import pytest

from tests.cluster.conftest import System, built

pytestmark = pytest.mark.cluster


def test_what_client_go_relies_on(system: System) -> None:
    program = built("clientgo") / "clientgo"
    for ns in ("clientgo", "clientgo-pages"):
        system.cluster.kubectl.run("create", "namespace", ns)
    done = subprocess.run(system.cluster.netns.command([
        str(program), "--kubeconfig", str(system.cluster.plane.admin),
        "--direct", str(system.data_dir / "kubeconfig")]),
        capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout)

    # aggregated discovery: /api and /apis, nothing per group version
    assert seen["discoveryPaths"] == ["/api", "/apis"], seen["discoveryPaths"]
    assert {"wgpolicyk8s.io", "reports.kyverno.io", "openreports.io"} <= set(
        seen["discoveryGroups"])
    # 40 merge patches from 8 goroutines: none refused, every label there
    assert seen["patchErrors"] is None, seen["patchErrors"]
    assert seen["patchedLabels"] == 40
    # server-side apply: bob's other value conflicts with alice's field
    assert seen["applyConflict"]
    assert seen["conflictCauses"] == [
        'FieldManagerConflict .metadata.labels.team: conflict with "alice"']
    assert seen["forcedValue"] == "b"
    assert "bob/Apply" in seen["managers"]
    # every page is the first page's snapshot, resourceVersions included
    assert seen["pagedNames"] == seen["fullNames"]
    assert seen["pagesEqual"]
