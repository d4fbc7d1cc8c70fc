"""What a migrated copy keeps and how copies are compared (pure), and the
summary a migration ends with."""

from __future__ import annotations

import copy

import pytest
import yaml

from launcher.migrate.api import MigrationError
from launcher.migrate.objects import (
    COPIED,
    FAILED,
    SKIPPED,
    UNCHANGED,
    Key,
    Tally,
    copy_body,
    digest,
    key_of,
    owned_by_reports,
)
from launcher.migrate.switch import apiservice_name, discovery_path, read_apiservices
from pipeline.model.resources import RESOURCES, by_kind

POLR = by_kind("wgpolicyk8s.io/v1alpha2", "PolicyReport")
CPOLR = by_kind("wgpolicyk8s.io/v1alpha2", "ClusterPolicyReport")
EPHR = by_kind("reports.kyverno.io/v1", "EphemeralReport")
assert POLR is not None and CPOLR is not None and EPHR is not None

REPORT = {
    "apiVersion": "wgpolicyk8s.io/v1alpha2", "kind": "PolicyReport",
    "metadata": {
        "name": "pod-1", "namespace": "team-a", "uid": "old-uid", "resourceVersion": "4711",
        "creationTimestamp": "2026-01-01T00:00:00Z", "generation": 3,
        "managedFields": [{"manager": "kyverno"}],
        "labels": {"app.kubernetes.io/managed-by": "kyverno"},
        "annotations": {"note": "x"}, "finalizers": ["example.com/keep"],
        "ownerReferences": [
            {"apiVersion": "v1", "kind": "Pod", "name": "pod-1", "uid": "pod-uid"},
            {"apiVersion": "wgpolicyk8s.io/v1alpha2", "kind": "ClusterPolicyReport",
             "name": "c", "uid": "report-old-uid"}]},
    "scope": {"apiVersion": "v1", "kind": "Pod", "name": "pod-1"},
    "results": [{"policy": "p", "result": "fail"}],
    "summary": {"fail": 1},
}


def test_a_copy_keeps_names_labels_annotations_owners_finalizers_and_content() -> None:
    body = copy_body(POLR, REPORT, {})
    assert body["metadata"] == {k: REPORT["metadata"][k] for k in (  # type: ignore[index]
        "name", "namespace", "labels", "annotations", "ownerReferences", "finalizers")}
    assert {k: body[k] for k in ("scope", "results", "summary")} == {
        k: REPORT[k] for k in ("scope", "results", "summary")}
    assert (body["apiVersion"], body["kind"]) == ("wgpolicyk8s.io/v1alpha2", "PolicyReport")


def test_owners_that_are_reports_get_their_copies_uid_others_keep_theirs() -> None:
    body = copy_body(POLR, REPORT, {"report-old-uid": "report-new-uid", "pod-uid": "nope"})
    refs = body["metadata"]["ownerReferences"]
    assert [r["uid"] for r in refs] == ["pod-uid", "report-new-uid"]
    assert owned_by_reports(REPORT)
    plain = copy.deepcopy(REPORT)
    plain["metadata"]["ownerReferences"] = plain["metadata"]["ownerReferences"][:1]
    assert not owned_by_reports(plain)
    # an owner not copied (yet): its reference is left as it is
    assert copy_body(POLR, REPORT, {})["metadata"]["ownerReferences"][1]["uid"] == \
        "report-old-uid"


def test_the_digest_ignores_what_the_destination_sets_and_sees_every_change() -> None:
    body = copy_body(POLR, REPORT, {})
    stored = {**copy.deepcopy(body), "metadata": {
        **body["metadata"], "uid": "new", "resourceVersion": "9", "generation": 1,
        "creationTimestamp": "2026-11-26T00:00:00Z", "managedFields": [{"manager": "m"}]}}
    assert digest(stored) == digest(body)
    for change in (lambda o: o["metadata"]["labels"].update(x="y"),
                   lambda o: o["metadata"].pop("finalizers"),
                   lambda o: o["results"].append({"policy": "q", "result": "pass"}),
                   lambda o: o.update(summary={"fail": 2})):
        changed = copy.deepcopy(body)
        change(changed)
        assert digest(changed) != digest(body)
    # key order does not matter
    assert digest(dict(reversed(list(body.items())))) == digest(body)


def test_cluster_scoped_copies_have_no_namespace_and_ephemeral_keep_their_spec() -> None:
    cluster = {"apiVersion": "wgpolicyk8s.io/v1alpha2", "kind": "ClusterPolicyReport",
               "metadata": {"name": "c", "namespace": ""}, "results": []}
    assert "namespace" not in copy_body(CPOLR, cluster, {})["metadata"]
    assert key_of(CPOLR, cluster) == Key(CPOLR.id, "", "c")
    ephemeral = {"apiVersion": "reports.kyverno.io/v1", "kind": "EphemeralReport",
                 "metadata": {"name": "e", "namespace": "ns"},
                 "spec": {"owner": {"kind": "Pod"}, "results": []}}
    assert copy_body(EPHR, ephemeral, {})["spec"] == ephemeral["spec"]


def test_the_summary_counts_outcomes_per_resource_and_gives_reasons() -> None:
    tally = Tally()
    tally.add(Key(POLR.id, "a", "x"), COPIED)
    tally.add(Key(POLR.id, "a", "y"), UNCHANGED)
    tally.add(Key(EPHR.id, "a", "z"), FAILED, "422 Invalid: results: bad")
    tally.add(Key(EPHR.id, "a", "w"), SKIPPED, "being deleted at the source")
    lines = tally.lines(RESOURCES)
    head = lines[0].split()
    rows = {line.split()[0]: dict(zip(head, map(int, line.split()[1:]), strict=True))
            for line in lines[1:8]}
    assert rows["policyreports"]["copied"] == 1 and rows["policyreports"]["unchanged"] == 1
    assert rows["ephemeralreports"]["failed"] == 1
    assert rows["total"] == {**dict.fromkeys(head, 0), "copied": 1, "unchanged": 1,
                             "failed": 1, "skipped": 1}
    assert f"failed: {EPHR.id} a/z: 422 Invalid: results: bad" in lines
    assert tally.total(FAILED) == 1 and tally.seen == 4


def test_the_switch_takes_the_charts_three_apiservices_and_nothing_else() -> None:
    def apiservice(group: str, version: str, service: bool = True) -> dict[str, object]:
        spec: dict[str, object] = {"group": group, "version": version}
        if service:
            spec["service"] = {"namespace": "reports", "name": "reports-pipeline"}
        return {"apiVersion": "apiregistration.k8s.io/v1", "kind": "APIService",
                "metadata": {"name": f"{version}.{group}"}, "spec": spec}
    three = [apiservice("wgpolicyk8s.io", "v1alpha2"), apiservice("reports.kyverno.io", "v1"),
             apiservice("openreports.io", "v1alpha1")]
    assert len(read_apiservices(yaml.safe_dump_all(three))) == 3
    with pytest.raises(MigrationError, match="must hold"):
        read_apiservices(yaml.safe_dump_all(three[:2]))
    with pytest.raises(MigrationError, match="names no service"):
        read_apiservices(yaml.safe_dump_all([*three[:2], apiservice("openreports.io",
                                                                     "v1alpha1", False)]))


def test_an_apiservices_group_version_is_served_at_its_discovery_path() -> None:
    assert discovery_path(apiservice_name("wgpolicyk8s.io", "v1alpha2")) == (
        "/apis/wgpolicyk8s.io/v1alpha2")
    assert discovery_path("v1.reports.kyverno.io") == "/apis/reports.kyverno.io/v1"
