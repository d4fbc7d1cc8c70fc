"""What the benchmark writes: Kyverno-shaped reports from the Pod Security
Standards "restricted" sample, and the mix of traffic. Pure: no I/O beyond
reading the packaged sample once."""

from __future__ import annotations

import copy
import random
import uuid
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any, ClassVar

import yaml

JSON = dict[str, Any]
SAMPLE = Path(__file__).with_name("data") / "pss-restricted-report.yaml"
POLR_PATH = "/apis/wgpolicyk8s.io/v1alpha2"
EPHR_PATH = "/apis/reports.kyverno.io/v1"
MANAGED = {"app.kubernetes.io/managed-by": "kyverno"}


@cache
def sample() -> JSON:
    loaded: JSON = yaml.safe_load(SAMPLE.read_text())
    return loaded


def sample_results() -> list[JSON]:
    results: list[JSON] = sample()["spec"]["results"]
    return results


def _results(failing: frozenset[int], now: int, *, extra: dict[int, JSON] | None = None
             ) -> list[JSON]:
    out = []
    for i, r in enumerate(sample_results()):
        r = copy.copy(r)
        r["timestamp"] = {"seconds": now, "nanos": 0}
        if i in failing:
            r["result"] = "fail"
            r["message"] = (f"validation error: {r['policy']} is violated. rule {r['rule']} "
                            f"failed at path /spec/containers/0/securityContext/")
        if extra and i in extra:
            r.update(extra[i])
        out.append(r)
    return out


def _summary(results: list[JSON]) -> dict[str, int]:
    summary = dict.fromkeys(("pass", "fail", "warn", "error", "skip"), 0)
    for r in results:
        summary[r["result"]] += 1
    return summary


@dataclass
class Resource:
    """One Pod and what the benchmark knows of its reports."""

    namespace: str
    name: str
    uid: str
    failing: frozenset[int] = frozenset()
    report_version: str | None = None
    admission_step: int = 0  # 0: none pending, 1: ephemeral created, 2: merged
    ephemeral_name: str | None = None

    @property
    def key(self) -> tuple[str, str]:
        return (self.namespace, self.uid)


def policy_report(res: Resource, now: int, *, extra: dict[int, JSON] | None = None) -> JSON:
    """The resource's PolicyReport as Kyverno's report controller writes it."""
    results = _results(res.failing, now, extra=extra)
    meta: JSON = {"name": res.uid, "namespace": res.namespace, "labels": dict(MANAGED)}
    if res.report_version is not None:
        meta["resourceVersion"] = res.report_version
    return {"apiVersion": "wgpolicyk8s.io/v1alpha2", "kind": "PolicyReport", "metadata": meta,
            "scope": {"apiVersion": "v1", "kind": "Pod", "name": res.name,
                      "namespace": res.namespace, "uid": res.uid},
            "summary": _summary(results), "results": results}


def ephemeral_report(res: Resource, now: int) -> JSON:
    """The EphemeralReport Kyverno's admission controller writes for the resource."""
    template = sample()
    results = _results(res.failing, now)
    labels = {**template["metadata"]["labels"], "audit.kyverno.io/resource.uid": res.uid,
              "audit.kyverno.io/source": "admission"}
    return {"apiVersion": "reports.kyverno.io/v1", "kind": "EphemeralReport",
            "metadata": {"generateName": f"{res.uid[:8]}-", "namespace": res.namespace,
                         "labels": labels},
            "spec": {"owner": {"apiVersion": "v1", "kind": "Pod", "name": res.name,
                               "uid": res.uid},
                     "summary": _summary(results), "results": results}}


def resources(count: int, namespaces: int, *, prefix: str, rng: random.Random
              ) -> list[Resource]:
    """``count`` Pods spread round-robin over ``namespaces`` namespaces."""
    out = []
    for i in range(count):
        uid = str(uuid.UUID(int=rng.getrandbits(128), version=4))
        ns = f"{prefix}-{i % namespaces:03d}"
        out.append(Resource(ns, f"pod-{i:06d}-{uid[:5]}", uid, random_failing(rng)))
    return out


def random_failing(rng: random.Random) -> frozenset[int]:
    """Most Pods pass; some fail a few rules, as in a real cluster."""
    n = len(sample_results())
    k = rng.choices((0, 1, 2, 3, 5), weights=(50, 20, 15, 10, 5))[0]
    return frozenset(rng.sample(range(n), k))


def flip(failing: frozenset[int], rng: random.Random) -> frozenset[int]:
    """A background scan finding one rule's result changed."""
    return failing ^ {rng.randrange(len(sample_results()))}


@dataclass(frozen=True)
class Mix:
    """Proportions of traffic kinds: each step of an admission (create the
    EphemeralReport, merge it into the PolicyReport, delete it), an in-place
    background-scan update, or a read (a get or a namespace list)."""

    admission: float = 50
    background: float = 40
    read: float = 10
    kinds: ClassVar[tuple[str, ...]] = ("admission", "background", "read")

    @classmethod
    def parse(cls, text: str) -> Mix:
        values: dict[str, float] = {}
        for part in filter(None, (p.strip() for p in text.split(","))):
            name, sep, value = part.partition("=")
            if not sep or name not in ("admission", "background", "read"):
                raise ValueError(f"bad mix entry {part!r}: use admission=N,background=N,read=N")
            try:
                values[name] = float(value)
            except ValueError:
                raise ValueError(f"bad mix weight {value!r}") from None
            if values[name] < 0:
                raise ValueError(f"mix weight of {name} is negative")
        mix = cls(**values)
        if mix.admission + mix.background <= 0:
            raise ValueError("the mix must contain writes (admission or background)")
        return mix

    def choose(self, rng: random.Random) -> str:
        return rng.choices(self.kinds, weights=(self.admission, self.background, self.read))[0]

    def __str__(self) -> str:
        return f"admission={self.admission:g},background={self.background:g},read={self.read:g}"
