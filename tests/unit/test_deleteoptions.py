"""DeleteOptions as the kube-apiserver checks them."""

from __future__ import annotations

from typing import Any

import pytest

from apiserver.contract.deleteoptions import parse
from apiserver.contract.errors import BadRequest, Invalid


@pytest.mark.parametrize(("body", "message"), [
    ({"preconditions": 5}, "cannot unmarshal number into Go struct field"
                           " DeleteOptions.preconditions of type v1.Preconditions"),
    ({"preconditions": {"uid": 7}}, "DeleteOptions.preconditions.uid of type string"),
    ({"gracePeriodSeconds": "soon"}, "DeleteOptions.gracePeriodSeconds of type int64"),
    ({"dryRun": "All"}, "DeleteOptions.dryRun of type []string"),
    ({"orphanDependents": "yes"}, "DeleteOptions.orphanDependents of type bool"),
    ({"kind": "Pod", "apiVersion": "v1"}, "must be DeleteOptions, not v1/Pod"),
])
def test_a_malformed_body_is_a_bad_request(body: Any, message: str) -> None:
    with pytest.raises(BadRequest) as refused:
        parse(body, {}, [])
    assert message in refused.value.message


@pytest.mark.parametrize(("query", "message"), [
    ({"gracePeriodSeconds": "x"}, 'gracePeriodSeconds: invalid value "x"'),
    ({"orphanDependents": "maybe"}, 'orphanDependents: invalid value "maybe"'),
])
def test_a_malformed_query_is_a_bad_request(query: dict[str, str], message: str) -> None:
    with pytest.raises(BadRequest) as refused:
        parse(None, query, [])
    assert message in refused.value.message


@pytest.mark.parametrize(("body", "query", "dry_run", "fields"), [
    ({"propagationPolicy": "Sideways"}, {}, [], ["propagationPolicy"]),
    (None, {"propagationPolicy": "Sideways"}, [], ["propagationPolicy"]),
    ({"propagationPolicy": "Orphan", "orphanDependents": True}, {}, [], ["propagationPolicy"]),
    (None, {}, ["Some"], ["dryRun[0]"]),
    ({"dryRun": ["All", "x"]}, {}, [], ["dryRun[1]"]),
])
def test_values_outside_their_enums_are_invalid(body: Any, query: dict[str, str],
                                                dry_run: list[str], fields: list[str]) -> None:
    with pytest.raises(Invalid) as refused:
        parse(body, query, dry_run)
    status = refused.value.status()
    assert status["code"] == 422 and status["details"]["kind"] == "DeleteOptions"
    assert [c["field"] for c in status["details"]["causes"]] == fields
    assert "name" not in status["details"]  # omitted when empty, as the kube-apiserver does
    assert status["message"].startswith('DeleteOptions.meta.k8s.io "" is invalid: ')


def test_what_is_honoured() -> None:
    options = parse({"kind": "DeleteOptions", "apiVersion": "v1",
                     "preconditions": {"uid": "u", "resourceVersion": "7"},
                     "propagationPolicy": "Foreground", "gracePeriodSeconds": 30}, {}, [])
    assert options.preconditions == {"uid": "u", "resourceVersion": "7"}
    assert options.finalizer == "foregroundDeletion" and not options.dry_run
    assert parse(None, {"orphanDependents": "true"}, []).finalizer == "orphan"
    assert parse(None, {"propagationPolicy": "Background"}, []).finalizer == ""
    assert parse(None, {}, ["All"]).dry_run
    # the body overrides the query, as in the kube-apiserver
    assert parse({"propagationPolicy": "Orphan"}, {"propagationPolicy": "Foreground"},
                 []).finalizer == "orphan"


@pytest.mark.parametrize("api_version", [
    "v1", "meta.k8s.io/v1", "meta.k8s.io/v1beta1", "wgpolicyk8s.io/v1alpha2",
    "reports.kyverno.io/v1", "openreports.io/v1alpha1"])
def test_delete_options_of_every_served_group_version(api_version: str) -> None:
    """Kyverno's typed clients delete EphemeralReports with DeleteOptions in
    reports.kyverno.io/v1; kube-apiserver takes it in every group version it
    serves, and checks it all the same."""
    options = parse({"kind": "DeleteOptions", "apiVersion": api_version,
                     "propagationPolicy": "Background"}, {}, [])
    assert options.propagation == "Background"
    with pytest.raises(Invalid):
        parse({"kind": "DeleteOptions", "apiVersion": api_version,
               "propagationPolicy": "Sideways"}, {}, [])


@pytest.mark.parametrize("api_version", ["apps/v1", "reports.kyverno.io/v2", "example.com/v1"])
def test_delete_options_of_a_group_version_not_served(api_version: str) -> None:
    with pytest.raises(BadRequest) as refused:
        parse({"kind": "DeleteOptions", "apiVersion": api_version}, {}, [])
    assert f"not {api_version}/DeleteOptions" in refused.value.message
