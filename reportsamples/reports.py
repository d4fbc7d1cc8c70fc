"""A Pod's reports as Kyverno writes them, from the Pod Security Standards
"restricted" sample (``data/pss-restricted-report.yaml``, an EphemeralReport
that README's walkthrough applies). Pure: no I/O beyond reading the packaged
sample once."""

from __future__ import annotations

import copy
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import yaml

JSON = dict[str, Any]
SAMPLE = Path(__file__).with_name("data") / "pss-restricted-report.yaml"
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
    """One Pod and what its writer knows of its reports (the benchmark keeps its
    admission steps here)."""

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
