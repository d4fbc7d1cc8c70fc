"""Weeks of a cluster's policy reports, as Kyverno writes them, for the demo.
Pure: no I/O beyond reading the packaged sample once.

A handful of teams each run a few Deployments. Every Pod has the PolicyReport
of the Pod Security Standards "restricted" profile that Kyverno's reports
controller keeps (named by the Pod's uid). Over the weeks:

- Deployments roll out every few days: their Pods are replaced, the old
  reports deleted, the new Pods' reports created. A rollout may bring new
  failures (a new image running as root, a sidecar asking for capabilities)
  or fix some (the team's remediation);
- in the second week a shared base image brings one failure to many
  Deployments at once; the following weeks fix it team by team;
- background scans write every report again twice a day, unchanged;
- the monitoring team's node exporter needs the host's namespaces, paths
  and ports by design: its failures stay.

The cluster's policies rate the Pod Security Standards' Baseline controls
(host namespaces, ports, paths and processes, privileged containers, added
capabilities, /proc mounts) high, privileged containers critical, and the
Restricted profile's own controls medium, as Kyverno's samples do.
"""

from __future__ import annotations

import random
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from reportsamples.reports import JSON, Resource, policy_report, sample_results

TEAMS = ("payments", "checkout", "catalog", "search", "identity", "monitoring")
APPS = ("api", "web", "worker", "cache", "gateway")
SCAN_HOURS = 12
HIGH = ("disallow-capabilities", "disallow-host-namespaces", "disallow-host-path",
        "disallow-host-ports", "disallow-host-process", "disallow-proc-mount")
CRITICAL = ("disallow-privileged-containers",)


@dataclass(frozen=True)
class Write:
    """One write Kyverno makes: create or update a report (``obj``), or delete it."""

    when: datetime
    op: str  # create, update, delete
    namespace: str
    name: str
    obj: JSON | None = None


@dataclass
class _Deployment:
    namespace: str
    name: str
    replicas: int
    failing: frozenset[int]
    pods: list[Resource] = field(default_factory=list)


def _index(policy: str) -> int:
    return next(i for i, r in enumerate(sample_results()) if r["policy"] == policy)


def _pod(deploy: _Deployment, rng: random.Random) -> Resource:
    uid = str(uuid.UUID(int=rng.getrandbits(128), version=4))
    suffix = "".join(rng.choices("bcdfghjklmnpqrstvwxz2456789", k=5))
    return Resource(deploy.namespace, f"{deploy.name}-{uid[:8]}-{suffix}", uid, deploy.failing)


def _severities() -> dict[int, JSON]:
    return {i: {"severity": "critical" if r["policy"] in CRITICAL else "high"}
            for i, r in enumerate(sample_results()) if r["policy"] in HIGH + CRITICAL}


def _report(pod: Resource, when: datetime) -> JSON:
    return policy_report(pod, int(when.timestamp()), extra=_severities())


def history(*, days: int, end: datetime, seed: int = 1) -> list[Write]:
    """Every write of ``days`` days up to ``end``, in time order."""
    return sorted(_writes(days=days, end=end, seed=seed), key=lambda w: w.when)


def _writes(*, days: int, end: datetime, seed: int) -> Iterator[Write]:
    rng = random.Random(seed)
    start = end - timedelta(days=days)
    rules = len(sample_results())
    base_image = _index("require-run-as-nonroot")
    deployments = [
        _Deployment(team, app, rng.choice((1, 2, 3)),
                    frozenset(rng.sample(range(rules), rng.choice((0, 0, 1, 1, 2, 3)))))
        for team in TEAMS for app in rng.sample(APPS, rng.choice((2, 3, 4)))]
    exporter = _Deployment("monitoring", "node-exporter", 3, frozenset(
        _index(p) for p in ("disallow-host-namespaces", "disallow-host-path",
                            "disallow-host-ports")))
    deployments.append(exporter)

    events: list[tuple[datetime, int, str, _Deployment | None]] = []
    for n, d in enumerate(deployments):
        when = start + timedelta(hours=rng.uniform(1, 72))
        while when < end:
            events.append((when, n, "rollout", d))
            when += timedelta(hours=rng.uniform(36, 120))
    regression = start + timedelta(days=min(days * 0.3, 8), hours=10)
    events.append((regression, -1, "base-image", None))
    scan = start + timedelta(hours=SCAN_HOURS)
    while scan < end:
        events.append((scan, -2, "scan", None))
        scan += timedelta(hours=SCAN_HOURS)
    events.sort(key=lambda e: (e[0], e[1]))

    def roll(d: _Deployment, when: datetime) -> Iterator[Write]:
        for old in d.pods:
            yield Write(when, "delete", old.namespace, old.uid)
        d.pods = []
        for i in range(d.replicas):
            pod = _pod(d, rng)
            d.pods.append(pod)
            yield Write(when + timedelta(seconds=5 + i), "create", pod.namespace, pod.uid,
                        _report(pod, when))

    for d in deployments:  # what runs when the history begins
        yield from roll(d, start)
    for when, _, what, target in events:
        if what == "rollout":
            assert target is not None
            after_regression = when > regression
            if target is exporter:
                pass  # by design
            elif target.failing and rng.random() < (0.55 if after_regression else 0.3):
                fixed = rng.sample(sorted(target.failing), rng.randint(1, len(target.failing)))
                target.failing = target.failing - set(fixed)
            elif rng.random() < 0.25:
                target.failing = target.failing | {rng.randrange(rules)}
            yield from roll(target, when)
        elif what == "base-image":
            for i, d in enumerate(deployments):
                if d is not exporter and rng.random() < 0.6:
                    d.failing = d.failing | {base_image}
                    yield from roll(d, when + timedelta(minutes=i))
        else:
            for d in deployments:
                for pod in d.pods:
                    at = when + timedelta(seconds=rng.uniform(0, 600))
                    yield Write(at, "update", pod.namespace, pod.uid, _report(pod, at))
