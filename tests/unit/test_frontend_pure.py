"""Pure parts of the frontend: validation, tables, negotiation, discovery."""

from __future__ import annotations

import pytest
from starlette.requests import Request

from apiserver.contract import openapi, tables, validation
from apiserver.contract.errors import BadRequest, Invalid, NotAcceptable
from apiserver.http import discovery
from apiserver.http.negotiation import wants
from pipeline.model.resources import RESOURCES, by_path
from tests.helpers import report

POLR, EPHR = RESOURCES[0], RESOURCES[2]


def test_check_object_fills_namespace_and_accepts_match() -> None:
    obj = report(POLR, "a", "ns")
    del obj["metadata"]["namespace"]
    out = validation.check_object(POLR, obj, namespace="ns", name=None)
    assert out["metadata"]["namespace"] == "ns"


@pytest.mark.parametrize("mutate, error", [
    (lambda o: o.update(apiVersion="wgpolicyk8s.io/v1beta1"), BadRequest),
    (lambda o: o.update(kind="ClusterPolicyReport"), BadRequest),
    (lambda o: o["metadata"].update(namespace="other"), BadRequest),
    (lambda o: o["metadata"].pop("name"), Invalid),
    (lambda o: o["metadata"].update(name="Not_A_Name"), Invalid),
    (lambda o: o["metadata"].update(labels={"a": 1}), Invalid),
])
def test_check_object_rejects(mutate, error) -> None:  # type: ignore[no-untyped-def]
    obj = report(POLR, "a", "ns")
    mutate(obj)
    with pytest.raises(error):
        validation.check_object(POLR, obj, namespace="ns", name=None)


def test_invalid_carries_causes() -> None:
    obj = report(POLR, "a", "ns")
    del obj["metadata"]["name"]
    with pytest.raises(Invalid) as info:
        validation.check_object(POLR, obj, namespace="ns", name=None)
    status = info.value.status()
    assert status["code"] == 422 and status["details"]["causes"][0]["field"] == "metadata.name"


def test_generate_name() -> None:
    obj = report(POLR, "a", "ns")
    obj["metadata"] = {"generateName": "pod-", "namespace": "ns"}
    out = validation.check_object(POLR, obj, namespace="ns", name=None)
    assert out["metadata"]["name"].startswith("pod-") and len(out["metadata"]["name"]) == 9


def test_name_mismatch_on_update() -> None:
    with pytest.raises(BadRequest):
        validation.check_object(POLR, report(POLR, "a", "ns"), namespace="ns", name="b")


def test_malformed_json_is_bad_request() -> None:
    with pytest.raises(BadRequest):
        validation.parse_body(b"{nope")
    with pytest.raises(BadRequest):
        validation.parse_body(b"[1]")


@pytest.mark.parametrize("seconds, text", [(5, "5s"), (119, "119s"), (150, "2m30s"),
                                           (600, "10m"), (3 * 3600 + 60, "3h1m"),
                                           (30 * 3600, "30h"), (3 * 86400, "3d"),
                                           (10 * 86400, "10d")])
def test_human_duration(seconds: int, text: str) -> None:
    assert tables.human_duration(seconds) == text


def test_table_rows_for_ephemeral_reports_read_spec() -> None:
    t = tables.table(EPHR, [report(EPHR, "x", "ns", fail=3)], resource_version="9")
    cells = t["rows"][0]["cells"]
    assert cells[:8] == ["x", "Pod", "kyverno-admission-controller-7d998c79c4-rj7th", 16, 3, 0,
                         0, 0]
    assert cells[9:] == [17, "kyverno"]
    assert [(c["name"], c["priority"]) for c in t["columnDefinitions"]] == [
        ("Name", 0), ("Kind", 0), ("Name", 0), ("Pass", 0), ("Fail", 0), ("Warn", 0),
        ("Error", 0), ("Skip", 0), ("Age", 0), ("Policies", 1), ("Source", 1)]
    assert t["rows"][0]["object"]["kind"] == "PartialObjectMetadata"


def _request(accept: str) -> Request:
    return Request({"type": "http", "headers": [(b"accept", accept.encode())]})


def test_negotiation() -> None:
    kubectl = ("application/json;as=Table;v=v1;g=meta.k8s.io,application/json;as=Table;"
               "v=v1beta1;g=meta.k8s.io,application/json")
    assert wants(_request(kubectl)) == "table"
    assert wants(_request("application/json")) == "json"
    assert wants(_request("application/yaml")) == "yaml"
    assert wants(_request("*/*")) == "json"
    with pytest.raises(NotAcceptable):
        wants(_request("application/vnd.kubernetes.protobuf"))


def test_discovery_lists_all_six_with_short_names() -> None:
    found = {}
    for group in discovery.api_group_list()["groups"]:
        gv = group["preferredVersion"]["version"]
        for r in discovery.api_resource_list(group["name"], gv)["resources"]:
            found[r["name"]] = r["shortNames"]
    assert found == {r.plural: list(r.short_names) for r in RESOURCES}
    assert by_path("wgpolicyk8s.io", "v1alpha2", "policyreports") is POLR


def test_openapi_documents_every_kind() -> None:
    index = openapi.v3_index()
    for r in RESOURCES:
        assert f"apis/{r.group}/{r.version}".encode() in index
        assert f'"kind":"{r.kind}"'.encode() in openapi.v3(r.group, r.version)
        assert f'"kind":"{r.kind}"'.encode() in openapi.v2()
