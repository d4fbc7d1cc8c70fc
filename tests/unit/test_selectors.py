"""Label and field selector parsing and matching."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from apiserver.contract.errors import BadRequest
from apiserver.contract.selectors import parse_field_selector, parse_label_selector

LABELS = {"app": "web", "tier": "front", "example.com/team": "a"}


@pytest.mark.parametrize("text, expected", [
    ("", True), ("app=web", True), ("app==web", True), ("app!=web", False),
    ("app in (web,db)", True), ("app notin (web, db)", False), ("tier", True), ("!tier", False),
    ("missing", False), ("!missing", True), ("missing!=x", True),
    ("app=web,tier=front", True), ("app=web,tier=back", False),
    ("example.com/team=a", True), ("app in (db)", False), ("app=", False),
])
def test_label_selector_matches(text: str, expected: bool) -> None:
    assert parse_label_selector(text).matches(LABELS) is expected


@pytest.mark.parametrize("text", ["app=(", "=x", "app in web", "app in ()", "a=b,",
                                  "app==web==x", "Bad Key=x", "a=b c", "a=" + "x" * 64, "!"])
def test_label_selector_rejects(text: str) -> None:
    with pytest.raises(BadRequest):
        parse_label_selector(text)


def test_field_selector() -> None:
    obj = {"metadata": {"name": "a", "namespace": "ns"}}
    assert parse_field_selector("metadata.name=a").matches(obj)
    assert not parse_field_selector("metadata.name!=a").matches(obj)
    assert parse_field_selector("metadata.namespace==ns,metadata.name=a").matches(obj)
    with pytest.raises(BadRequest):
        parse_field_selector("spec.x=a")
    with pytest.raises(BadRequest):
        parse_field_selector("metadata.name")


keys = st.from_regex(r"\A[a-z][a-z0-9]{0,5}\Z")
values = st.from_regex(r"\A[a-z0-9]{0,5}\Z")


@given(st.dictionaries(keys, values, max_size=4), keys, values)
def test_equality_matches_like_a_dict_lookup(labels: dict[str, str], key: str, value: str
                                             ) -> None:
    assert parse_label_selector(f"{key}={value}").matches(labels) is (labels.get(key) == value)
    assert parse_label_selector(f"{key}!={value}").matches(labels) is (labels.get(key) != value)
    assert parse_label_selector(key).matches(labels) is (key in labels)
