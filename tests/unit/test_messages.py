"""Codec round trips of the pipeline's topics."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from pipeline.model.messages import Change, EventType, Op, Reply, WriteRequest

text = st.text(max_size=20)
json_values = st.recursive(st.none() | st.booleans() | st.integers(-2**53, 2**53) | text,
                           lambda c: st.lists(c, max_size=3) | st.dictionaries(text, c,
                                                                                 max_size=3),
                           max_leaves=10)


@given(text, st.sampled_from(["create", "update", "delete"]), text, text,
       st.none() | st.dictionaries(text, json_values, max_size=4))
def test_write_request_round_trip(rid: str, op: Op, ns: str, name: str, obj: dict | None) -> None:
    r = WriteRequest(id=rid, op=op, resource="policyreports.wgpolicyk8s.io",
                     namespace=ns, name=name, reply_to="t", now="n", obj=obj)
    assert WriteRequest.decode(r.encode()) == r


@given(text, st.integers(0, 2**63), st.none() | st.dictionaries(text, json_values, max_size=4))
def test_reply_round_trip(rid: str, rv: int, status: dict | None) -> None:
    r = Reply(rid, rv, obj={"a": 1}, status=status)
    assert Reply.decode(r.encode()) == r


@given(st.sampled_from(["ADDED", "MODIFIED", "DELETED"]), st.integers(1, 2**63))
def test_change_round_trip(etype: EventType, rv: int) -> None:
    c = Change(etype, {"metadata": {"resourceVersion": str(rv)}}, rv, "req")
    assert Change.decode(c.encode(), "req") == c


def test_the_object_of_an_encoded_change_is_found_without_parsing() -> None:
    import orjson

    etypes: tuple[EventType, ...] = ("ADDED", "MODIFIED", "DELETED")
    for etype in etypes:
        obj = {"metadata": {"name": "x", "resourceVersion": "7"}, "results": [{"a": "}"}]}
        raw = Change(etype, obj, 7).encode()
        inner = Change.object_json(raw)
        assert inner is not None and orjson.loads(inner) == obj
    assert Change.object_json(b'{"object":{},"type":"ADDED"}') is None
