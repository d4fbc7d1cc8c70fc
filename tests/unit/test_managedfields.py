"""Field ownership as kube-apiserver's field manager records it: apply
conflicts with other managers unless forced, shared ownership of equal
values, fields an applier stops applying removed unless others own them, and
ordinary writes taking the fields they change."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pipeline.model import managedfields as mf

API = "wgpolicyk8s.io/v1alpha2"


def report(**labels: str) -> dict[str, Any]:
    return {"apiVersion": API, "kind": "PolicyReport",
            "metadata": {"name": "r", "namespace": "ns", "labels": dict(labels),
                         "resourceVersion": "7", "uid": "u"},
            "summary": {"pass": 1, "fail": 0}}


def owners(obj: dict[str, Any]) -> dict[tuple[str, str], set[tuple[str, ...]]]:
    return {(e["manager"], e["operation"]): mf.from_fields(e["fieldsV1"])
            for e in obj["metadata"].get("managedFields", [])}


def test_a_second_applier_changing_a_field_conflicts_unless_forced() -> None:
    first = mf.apply(None, report(team="a"), manager="alice", api_version=API)
    with pytest.raises(mf.Conflicts) as raised:
        mf.apply(first, report(team="b"), manager="bob", api_version=API)
    [conflict] = [c for c in raised.value.conflicts if c.path == ("metadata", "labels", "team")]
    assert conflict.message() == 'conflict with "alice": .metadata.labels.team'
    forced = mf.apply(first, report(team="b"), manager="bob", api_version=API, force=True)
    assert forced["metadata"]["labels"]["team"] == "b"
    held = owners(forced)
    assert ("metadata", "labels", "team") in held[("bob", "Apply")]
    assert ("metadata", "labels", "team") not in held[("alice", "Apply")]


def test_applying_the_same_value_shares_the_field() -> None:
    first = mf.apply(None, report(team="a"), manager="alice", api_version=API)
    second = mf.apply(first, report(team="a"), manager="bob", api_version=API)
    held = owners(second)
    assert ("metadata", "labels", "team") in held[("alice", "Apply")]
    assert ("metadata", "labels", "team") in held[("bob", "Apply")]
    # alice stops applying it: bob still owns it, so it stays
    obj = report()
    del obj["metadata"]["labels"]
    third = mf.apply(second, obj, manager="alice", api_version=API)
    assert third["metadata"]["labels"] == {"team": "a"}


def test_a_field_no_longer_applied_and_owned_by_none_goes() -> None:
    first = mf.apply(None, report(team="a", tier="web"), manager="alice", api_version=API)
    second = mf.apply(first, report(team="a"), manager="alice", api_version=API)
    assert second["metadata"]["labels"] == {"team": "a"}


def test_an_update_takes_the_fields_it_changed_from_their_owner() -> None:
    applied = mf.apply(None, report(team="a"), manager="alice", api_version=API)
    changed = report(team="b")
    changed["metadata"]["managedFields"] = applied["metadata"]["managedFields"]
    updated = mf.update(applied, changed, manager="kubectl-label", api_version=API)
    held = owners(updated)
    assert held[("kubectl-label", "Update")] == {("metadata", "labels", "team")}
    assert ("metadata", "labels", "team") not in held[("alice", "Apply")]
    # and alice's next apply of her value conflicts with kubectl-label's Update
    with pytest.raises(mf.Conflicts) as raised:
        mf.apply(updated, report(team="a"), manager="alice", api_version=API)
    assert raised.value.conflicts[0].message() == (
        f'conflict with "kubectl-label" using {API}: .metadata.labels.team')


def test_a_create_owns_every_field() -> None:
    created = mf.update(None, report(team="a"), manager="kyverno", api_version=API)
    assert owners(created)[("kyverno", "Update")] == {
        ("metadata", "labels", "team"), ("metadata", "name"), ("metadata", "namespace"),
        ("summary", "pass"), ("summary", "fail")}


def test_the_manager_of_a_write_naming_none() -> None:
    assert mf.manager_from_user_agent("kubectl/v1.37.2 (linux/amd64)") == "kubectl"
    assert mf.manager_from_user_agent("") == "unknown"


labels = st.dictionaries(st.sampled_from("abcdef"), st.sampled_from(["x", "y"]), max_size=4)


@given(st.lists(st.tuples(st.sampled_from(["alice", "bob", "carol"]), labels,
                          st.booleans()), min_size=1, max_size=8))
def test_every_field_has_an_owner_and_no_owner_holds_a_missing_field(
        steps: list[tuple[str, dict[str, str], bool]]) -> None:
    """Whatever managers apply (forced or not), each label present is owned by
    a manager, and no entry owns a label that is gone."""
    obj: dict[str, Any] | None = None
    for manager, wanted, force in steps:
        try:
            obj = mf.apply(obj, report(**wanted), manager=manager, api_version=API,
                           force=force)
        except mf.Conflicts:
            assert not force
            continue
    assert obj is not None
    present = {("metadata", "labels", k) for k in obj["metadata"]["labels"]}
    owned = set().union(*owners(obj).values())
    # (an empty map applied is a field of its own, as in kube-apiserver)
    label_paths = {p for p in owned if p[:2] == ("metadata", "labels") and len(p) == 3}
    assert present <= owned
    assert label_paths <= present


@given(st.lists(st.tuples(st.sampled_from(["alice", "bob", "kubectl"]), labels,
                          st.booleans()), min_size=1, max_size=8))
def test_updates_and_applies_together_keep_every_field_owned(
        steps: list[tuple[str, dict[str, str], bool]]) -> None:
    """Appliers and an ordinary writer (``kubectl``: an update that sets the
    labels) in any order: each label present has an owner, none owns a
    label that is gone."""
    obj: dict[str, Any] | None = None
    for manager, wanted, force in steps:
        if manager == "kubectl":
            new = report(**wanted)
            if obj is not None:
                new["metadata"]["managedFields"] = obj["metadata"].get("managedFields", [])
            obj = mf.update(obj, new, manager=manager, api_version=API)
            continue
        try:
            obj = mf.apply(obj, report(**wanted), manager=manager, api_version=API,
                           force=force)
        except mf.Conflicts:
            continue
    assert obj is not None
    present = {("metadata", "labels", k) for k in obj["metadata"]["labels"]}
    owned = set().union(*owners(obj).values())
    assert present <= owned
    assert {p for p in owned if p[:2] == ("metadata", "labels") and len(p) == 3} <= present
