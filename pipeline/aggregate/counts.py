"""Aggregating policy results by namespace and policy. Pure: no I/O.

Each committed report contributes the statuses of its results. The aggregator
keeps, per report, the contribution it last applied and that change's
resourceVersion; a change applies the difference between the old and the new
contribution, and a change not newer than the applied one is ignored. So counts
stay exact under updates, deletes, and redelivery of the same change.

Ephemeral reports are excluded: they are merged into PolicyReports by the
policy engine, and counting both would count results twice.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from pipeline.model import objects, resources
from pipeline.model.resources import ResourceType

JSON = dict[str, Any]
STATUSES = objects.SUMMARY_FIELDS
#: (namespace, policy, status)
CountKey = tuple[str, str, str]
#: (policy, rule, resource) -> status
Statuses = dict[tuple[str, str, str], str]


def counted(rtype: ResourceType) -> bool:
    return not rtype.body_path


def counted_key(key: bytes | None) -> bool:
    """Whether a change log record with this key (``<resource>/<namespace>/
    <name>``) may count: known from the key alone, so the changes of
    ephemeral reports (a third of admission's) need no decoding."""
    try:
        rtype = resources.by_id((key or b"").split(b"/", 1)[0].decode(errors="replace"))
    except KeyError:
        return True  # decoded, and judged by its object
    return counted(rtype)


def _resource_ref(result: JSON, scope: tuple[str, str], namespace: str) -> str:
    refs = result.get("resources")
    if isinstance(refs, list) and refs and isinstance(refs[0], dict):
        ref = refs[0]
        return "/".join((str(ref.get("kind") or ""), str(ref.get("namespace") or namespace),
                         str(ref.get("name") or "")))
    return "/".join((scope[0], namespace, scope[1]))


@dataclass(frozen=True)
class Applied:
    """What one report contributes: its results' statuses, as of a version."""

    resource_version: int
    namespace: str
    statuses: Statuses = field(default_factory=dict)
    details: dict[tuple[str, str, str], JSON] = field(default_factory=dict)

    def counts(self) -> dict[CountKey, int]:
        out: dict[CountKey, int] = {}
        for (policy, _, _), status in self.statuses.items():
            key = (self.namespace, policy, status)
            out[key] = out.get(key, 0) + 1
        return out

    def to_json(self) -> JSON | str:
        """The contribution as the agent's table keeps it (in memory, a
        million of them): one string, not a list of lists of strings (a
        Kyverno report's took 7 KB of the interpreter's objects, this under
        1 KB). The results' resource, mostly the same for all, is written
        once. Names holding the separator (no Kubernetes name can) keep the
        nested form, which ``from_json`` reads as well."""
        items = self.statuses.items()
        common = next(iter(self.statuses))[2] if self.statuses else ""
        try:
            flat = [str(self.resource_version), self.namespace, common,
                    *(x for (p, r, res), st in items
                      for x in (p, r, "" if res == common else res, _CODES[st]))]
        except KeyError:  # a status this form has no code for
            flat = []
        packed = _SEP.join(flat)
        if flat and packed.count(_SEP) == len(flat) - 1:
            return packed
        return {"rv": self.resource_version, "ns": self.namespace,
                "s": [[p, r, res, st] for (p, r, res), st in items]}

    @classmethod
    def from_json(cls, value: JSON | str) -> Applied:
        if isinstance(value, dict):
            return cls(int(value["rv"]), str(value["ns"]),
                       {(p, r, res): st for p, r, res, st in value["s"]})
        flat = value.split(_SEP)
        common = flat[2]
        return cls(int(flat[0]), flat[1], {
            (flat[i], flat[i + 1], flat[i + 2] or common): _STATUSES[flat[i + 3]]
            for i in range(3, len(flat), 4)})


#: the packed form's separator (ASCII's unit separator) and status codes
_SEP = "\x1f"
_CODES = {"pass": "p", "fail": "f", "warn": "w", "error": "e", "skip": "s"}
_STATUSES = {code: status for status, code in _CODES.items()}


def contribution(obj: JSON, resource_version: int) -> Applied | None:
    """The contribution of a stored report object (None for uncounted kinds)."""
    rtype = resources.by_kind(str(obj.get("apiVersion")), str(obj.get("kind")))
    if rtype is None or not counted(rtype):
        return None
    namespace = objects.metadata(obj).get("namespace") or ""
    scope = objects.scope(rtype, obj)
    statuses: Statuses = {}
    details: dict[tuple[str, str, str], JSON] = {}
    for result in objects.results(rtype, obj):
        status = result.get("result")
        if status not in STATUSES:
            continue
        key = (str(result.get("policy") or ""), str(result.get("rule") or ""),
               _resource_ref(result, scope, namespace))
        statuses[key] = str(status)
        details[key] = {k: result.get(k) for k in ("severity", "category", "source", "message")
                        if result.get(k) is not None}
    return Applied(resource_version, namespace, statuses, details)


@dataclass(frozen=True)
class Transition:
    """A result whose status changed: ``previous`` None when it appeared,
    ``current`` None when it went away."""

    namespace: str
    policy: str
    rule: str
    resource: str
    previous: str | None
    current: str | None
    details: JSON


@dataclass(frozen=True)
class Activity:
    written: int = 0
    new_failures: int = 0
    resolved_failures: int = 0


@dataclass(frozen=True)
class Outcome:
    applied: Applied | None
    delta: dict[CountKey, int]
    transitions: list[Transition]
    #: (namespace, policy) -> what happened in this change
    activity: dict[tuple[str, str], Activity]


def apply_change(previous: Applied | None, *, resource_version: int, obj: JSON,
                 deleted: bool) -> Outcome | None:
    """The effect of one committed change on a report whose applied
    contribution is ``previous``; None when the change is not newer than it."""
    if previous is not None and resource_version <= previous.resource_version:
        return None
    new = contribution(obj, resource_version)
    if new is None:
        return None
    current = Applied(resource_version, new.namespace) if deleted else new
    delta: dict[CountKey, int] = dict(current.counts())
    for key, n in (previous.counts() if previous else {}).items():
        delta[key] = delta.get(key, 0) - n
    delta = {k: v for k, v in delta.items() if v}

    old = previous.statuses if previous else {}
    transitions = []
    for ref in sorted(set(old) | set(current.statuses)):
        before, after = old.get(ref), current.statuses.get(ref)
        if before != after:
            transitions.append(Transition(current.namespace, ref[0], ref[1], ref[2], before,
                                          after, new.details.get(ref, {})))
    activity: dict[tuple[str, str], Activity] = {}
    for (policy, _, _) in current.statuses:
        a = activity.get((current.namespace, policy), Activity())
        activity[(current.namespace, policy)] = Activity(a.written + 1, a.new_failures,
                                                         a.resolved_failures)
    for t in transitions:
        a = activity.get((t.namespace, t.policy), Activity())
        activity[(t.namespace, t.policy)] = Activity(
            a.written, a.new_failures + (t.current == "fail" and t.previous != "fail"),
            a.resolved_failures + (t.previous == "fail" and t.current != "fail"))
    return Outcome(None if deleted else current, delta, transitions, activity)


def add_into(totals: dict[CountKey, int], delta: Mapping[CountKey, int]) -> None:
    """Adds ``delta`` to ``totals`` in place, dropping counts that reach zero:
    the aggregator's totals (thousands of counts) take every change's delta,
    which a copy each time made cost the totals' size."""
    for key, n in delta.items():
        value = totals.get(key, 0) + n
        if value:
            totals[key] = value
        else:
            totals.pop(key, None)


def recount(reports: Iterable[JSON]) -> dict[CountKey, int]:
    """Counts from scratch over a set of current report objects."""
    totals: dict[CountKey, int] = {}
    for obj in reports:
        applied = contribution(obj, 0)
        if applied is not None:
            add_into(totals, applied.counts())
    return totals


def by_policy(totals: Mapping[CountKey, int]) -> dict[tuple[str, str], dict[str, int]]:
    """(namespace, policy) -> counts per status."""
    out: dict[tuple[str, str], dict[str, int]] = {}
    for (ns, policy, status), n in totals.items():
        out.setdefault((ns, policy), dict.fromkeys(STATUSES, 0))[status] = n
    return out


def across_namespaces(totals: Mapping[CountKey, int]) -> dict[str, dict[str, int]]:
    """policy -> counts per status, summed over every namespace."""
    out: dict[str, dict[str, int]] = {}
    for (_, policy, status), n in totals.items():
        counts = out.setdefault(policy, dict.fromkeys(STATUSES, 0))
        counts[status] += n
    return out
