"""Properties of the pure aggregation: counts maintained from differences equal a
recount from the final set of reports, whatever the order of writes and however
often a change is redelivered."""

from __future__ import annotations

import copy

from hypothesis import given, settings
from hypothesis import strategies as st

from pipeline.aggregate import counts as aggregate
from pipeline.model.resources import RESOURCES
from tests.helpers import report

POLR, CPOLR, EPHR = RESOURCES[0], RESOURCES[1], RESOURCES[2]
STATUS = st.sampled_from(["pass", "fail", "warn", "error", "skip"])


def make(rtype, name: str, ns: str, statuses: list[str]) -> dict:  # type: ignore[no-untyped-def]
    obj = report(rtype, name, ns)
    body = obj["spec"] if rtype.body_path else obj
    body["results"] = body["results"][:len(statuses)]
    for r, s in zip(body["results"], statuses, strict=True):
        r["result"] = s
    return obj


ops = st.lists(st.tuples(
    st.sampled_from(["put", "delete", "redeliver"]),
    st.sampled_from([(POLR, "a", "ns1"), (POLR, "b", "ns1"), (POLR, "a", "ns2"),
                     (CPOLR, "c", ""), (EPHR, "e", "ns1")]),
    st.lists(STATUS, min_size=0, max_size=6)), max_size=40)


@settings(max_examples=300, deadline=None)
@given(ops)
def test_counts_equal_a_recount_under_any_history(history) -> None:  # type: ignore[no-untyped-def]
    applied: dict[tuple[str, str, str], aggregate.Applied] = {}
    totals: dict[aggregate.CountKey, int] = {}
    live: dict[tuple[str, str, str], dict] = {}  # type: ignore[type-arg]
    log: list[tuple[tuple[str, str, str], int, dict, bool]] = []  # type: ignore[type-arg]
    rv = 0
    for op, (rtype, name, ns), statuses in history:
        key = (rtype.id, ns, name)
        if op == "redeliver":
            if not log:
                continue
            change = log[len(statuses) % len(log)]  # any earlier change, again
        elif op == "delete":
            if key not in live:
                continue
            rv += 1
            change = (key, rv, copy.deepcopy(live.pop(key)), True)
            log.append(change)
        else:
            rv += 1
            live[key] = make(rtype, name, ns, statuses)
            change = (key, rv, copy.deepcopy(live[key]), False)
            log.append(change)
        ckey, crv, obj, deleted = change
        outcome = aggregate.apply_change(applied.get(ckey), resource_version=crv, obj=obj,
                                         deleted=deleted)
        if outcome is None:
            continue
        aggregate.add_into(totals, outcome.delta)
        if outcome.applied is None:
            applied[ckey] = aggregate.Applied(crv, ns)
        else:
            applied[ckey] = outcome.applied
    assert totals == aggregate.recount(live.values())


def test_transitions_and_activity() -> None:
    first = aggregate.apply_change(None, resource_version=1,
                                   obj=make(POLR, "a", "ns", ["pass", "pass"]), deleted=False)
    assert first is not None and first.applied is not None
    second = aggregate.apply_change(first.applied, resource_version=2,
                                    obj=make(POLR, "a", "ns", ["fail", "pass"]), deleted=False)
    assert second is not None
    [t] = second.transitions
    assert (t.previous, t.current, t.policy, t.details["severity"]) == (
        "pass", "fail", "disallow-capabilities", "medium")
    assert second.activity[("ns", "disallow-capabilities")].new_failures == 1
    assert aggregate.apply_change(second.applied, resource_version=2,
                                  obj=make(POLR, "a", "ns", ["pass"]), deleted=False) is None
    gone = aggregate.apply_change(second.applied, resource_version=3,
                                  obj=make(POLR, "a", "ns", ["fail", "pass"]), deleted=True)
    assert gone is not None and gone.applied is None
    assert sum(gone.delta.values()) == -2
    assert gone.activity[("ns", "disallow-capabilities")].resolved_failures == 1


def test_applied_round_trips_through_json() -> None:
    out = aggregate.apply_change(None, resource_version=4,
                                 obj=make(POLR, "a", "ns", ["fail", "warn"]), deleted=False)
    assert out is not None and out.applied is not None
    packed = out.applied.to_json()
    assert isinstance(packed, str)  # one string, not lists of strings
    back = aggregate.Applied.from_json(packed)
    assert back.resource_version == 4 and back.namespace == "ns"
    assert back.statuses == out.applied.statuses and back.counts() == out.applied.counts()


def test_packed_contributions_keep_every_resource_and_read_the_nested_form() -> None:
    """Results about other resources than the report's most common one keep
    theirs; names holding a separator, and the nested form an earlier
    version wrote to the table's changelog, round-trip as well."""
    statuses = {("p1", "r1", "Pod/ns/a"): "fail", ("p1", "r2", "Pod/ns/a"): "pass",
                ("p2", "r1", "Deployment/ns/b"): "warn", ("p3", "r", "Pod/ns/a"): "skip",
                ("p4", "", "Pod/ns/a"): "error"}
    applied = aggregate.Applied(9, "ns", statuses)
    back = aggregate.Applied.from_json(applied.to_json())
    assert (back.resource_version, back.namespace, back.statuses) == (9, "ns", statuses)
    odd = aggregate.Applied(3, "ns", {("p\x1fq", "r", "Pod/ns/a"): "pass"})
    assert isinstance(odd.to_json(), dict)
    assert aggregate.Applied.from_json(odd.to_json()).statuses == odd.statuses
    nested = {"rv": 2, "ns": "ns", "s": [["p1", "r1", "Pod/ns/a", "fail"]]}
    assert aggregate.Applied.from_json(nested).statuses == {("p1", "r1", "Pod/ns/a"): "fail"}
    assert aggregate.Applied.from_json(aggregate.Applied(1, "ns").to_json()).statuses == {}


def test_counts_across_namespaces_sum_every_namespace_of_a_policy() -> None:
    totals = {("a", "p", "fail"): 2, ("b", "p", "fail"): 3, ("b", "p", "pass"): 1,
              ("a", "q", "pass"): 4}
    assert aggregate.across_namespaces(totals) == {
        "p": {"pass": 1, "fail": 5, "warn": 0, "error": 0, "skip": 0},
        "q": {"pass": 4, "fail": 0, "warn": 0, "error": 0, "skip": 0}}


def test_ephemeral_reports_are_left_out_by_their_key_alone() -> None:
    """The change log's key names the resource: the changes of ephemeral
    reports, never counted, are skipped before their object is decoded."""
    from pipeline.model.objects import object_key
    for rtype in RESOURCES:
        key = object_key(rtype, "ns" if rtype.namespaced else "", "a").encode()
        assert aggregate.counted_key(key) == aggregate.counted(rtype)
        assert aggregate.counted_key(key) == (aggregate.contribution(
            report(rtype, "a", "ns" if rtype.namespaced else ""), 1) is not None)
    assert aggregate.counted_key(b"widgets.example.com/ns/a")  # unknown: decoded, then judged
    assert aggregate.counted_key(None)
