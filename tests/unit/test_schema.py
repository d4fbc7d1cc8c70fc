"""Report bodies against their structural schema: what a CRD-backed resource
refuses is refused, one cause per bad field, in the kube-apiserver's words."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from apiserver.contract import openapi, schema
from apiserver.contract.errors import Invalid
from apiserver.contract.validation import check_object
from pipeline.model.resources import RESOURCES, by_id
from tests.helpers import report

POLR = by_id("policyreports.wgpolicyk8s.io")
EPHR = by_id("ephemeralreports.reports.kyverno.io")
REPORT = by_id("reports.openreports.io")


def body(rtype: Any, **fields: Any) -> dict[str, Any]:
    obj = report(rtype, "r", "ns" if rtype.namespaced else "")
    target = obj["spec"] if rtype.body_path else obj
    target.update(fields)
    return obj


@pytest.mark.parametrize("rtype", RESOURCES, ids=lambda r: r.id)
def test_the_sample_reports_are_valid(rtype: Any) -> None:
    assert schema.causes(rtype, report(rtype, "r", "ns" if rtype.namespaced else "")) == []


CASES = [
    ({"results": "nope"}, [("results", "FieldValueTypeInvalid",
                            'Invalid value: "string": results in body must be of type array:'
                            ' "string"')]),
    ({"results": [1, 2]}, [
        ("results[0]", "FieldValueTypeInvalid",
         'Invalid value: "integer": results[0] in body must be of type object: "integer"'),
        ("results[1]", "FieldValueTypeInvalid",
         'Invalid value: "integer": results[1] in body must be of type object: "integer"')]),
    ({"results": [{"policy": "p", "result": "maybe"}]}, [
        ("results[0].result", "FieldValueNotSupported",
         'Unsupported value: "maybe": supported values: "pass", "fail", "warn", "error",'
         ' "skip"')]),
    ({"summary": {"pass": "x"}}, [
        ("summary.pass", "FieldValueTypeInvalid",
         'Invalid value: "string": summary.pass in body must be of type integer: "string"')]),
    ({"results": [{"result": "pass"}]}, [("results[0].policy", "FieldValueRequired",
                                          "Required value")]),
    ({"results": [{"policy": "p", "severity": "urgent"}]}, [
        ("results[0].severity", "FieldValueNotSupported",
         'Unsupported value: "urgent": supported values: "critical", "high", "medium", "low",'
         ' "info"')]),
    ({"results": [{"policy": "p", "timestamp": {"seconds": 1}}]}, [
        ("results[0].timestamp.nanos", "FieldValueRequired", "Required value")]),
    ({"results": [{"policy": "p", "timestamp": {"seconds": 1, "nanos": 2**31}}]}, [
        ("results[0].timestamp.nanos", "FieldValueInvalid",
         "Invalid value: 2147483648: results[0].timestamp.nanos in body should be less than or"
         " equal to 2147483647")]),
    ({"results": [{"policy": "p", "scored": "yes", "properties": {"score": 9}}]}, [
        ("results[0].properties.score", "FieldValueTypeInvalid",
         'Invalid value: "integer": results[0].properties.score in body must be of type'
         ' string: "integer"'),
        ("results[0].scored", "FieldValueTypeInvalid",
         'Invalid value: "string": results[0].scored in body must be of type boolean:'
         ' "string"')]),
]


@pytest.mark.parametrize(("fields", "expected"), CASES, ids=[str(c[0])[:40] for c in CASES])
def test_each_bad_field_is_one_cause(fields: dict[str, Any],
                                     expected: list[tuple[str, str, str]]) -> None:
    for rtype in (POLR, EPHR, REPORT):
        prefix = "spec." if rtype.body_path else ""
        got = [(c["field"], c["reason"], c["message"]) for c in
               schema.causes(rtype, body(rtype, **fields))]
        assert got == [(prefix + f, r, m.replace(f" {f} in body", f" {prefix}{f} in body"))
                       for f, r, m in expected]


def test_the_refusal_is_worded_as_for_a_custom_resource() -> None:
    with pytest.raises(Invalid) as refused:
        check_object(POLR, body(POLR, results=[{"policy": "p", "result": "maybe"}],
                                summary={"pass": "x"}), namespace="ns", name=None)
    status = refused.value.status()
    assert status["code"] == 422 and status["reason"] == "Invalid"
    assert status["message"] == (
        'PolicyReport.wgpolicyk8s.io "r" is invalid: [results[0].result: Unsupported value:'
        ' "maybe": supported values: "pass", "fail", "warn", "error", "skip", summary.pass:'
        ' Invalid value: "string": summary.pass in body must be of type integer: "string"]')
    assert status["details"]["kind"] == "PolicyReport"
    assert status["details"]["group"] == "wgpolicyk8s.io"
    assert [c["field"] for c in status["details"]["causes"]] == ["results[0].result",
                                                                 "summary.pass"]


def test_an_ephemeral_report_needs_its_owner() -> None:
    obj = body(EPHR)
    del obj["spec"]["owner"]
    assert [(c["field"], c["message"]) for c in schema.causes(EPHR, obj)] == [
        ("spec.owner", "Required value")]
    obj = body(EPHR)
    obj["spec"]["owner"] = {"apiVersion": "v1", "kind": "Pod", "name": "p"}
    assert [c["field"] for c in schema.causes(EPHR, obj)] == ["spec.owner.uid"]


def test_openreports_configuration() -> None:
    assert [c["field"] for c in schema.causes(REPORT, body(REPORT, configuration={}))] == [
        "configuration.limits"]
    bad = body(REPORT, configuration={"limits": {"maxResults": "ten",
                                                 "statusFilter": ["fail", "bad"]}})
    assert [c["field"] for c in schema.causes(REPORT, bad)] == [
        "configuration.limits.maxResults", "configuration.limits.statusFilter[1]"]


def test_nulls_are_absent_fields() -> None:
    assert schema.causes(POLR, body(POLR, summary=None, scope=None)) == []


def test_the_metadata_is_not_the_schemas_business() -> None:
    obj = copy.deepcopy(body(POLR))
    obj["metadata"]["labels"] = {"a": "b"}
    assert schema.causes(POLR, obj) == []


@pytest.mark.parametrize("rtype", RESOURCES, ids=lambda r: r.kind)
def test_the_fast_check_for_unknown_fields_agrees_with_the_walk(rtype: Any) -> None:
    good = report(rtype, "r", "ns" if rtype.namespaced else "", fail=2)
    good["metadata"]["labels"] = {"app": "web"}
    assert schema.surely_known(rtype, good) and openapi.unknown_fields(rtype, good) == []
    body_field = "spec" if rtype.body_path else "summary"
    for path in (["resutls"], ["metadata", "lables"], [body_field, "nope"]):
        bad = copy.deepcopy(good)
        node = bad
        for part in path[:-1]:
            node = node.setdefault(part, {})
        node[path[-1]] = 1
        assert not schema.surely_known(rtype, bad)
        assert openapi.unknown_fields(rtype, bad) == [".".join(path)]
    # a type error is not an unknown field: the fast check defers to the walk
    typed = copy.deepcopy(good)
    typed["metadata"]["labels"] = {"app": 5}
    assert not schema.surely_known(rtype, typed) and openapi.unknown_fields(rtype, typed) == []
