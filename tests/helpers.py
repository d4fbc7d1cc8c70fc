"""Report objects for tests, built from the realistic sample report the
repository carries (``reportsamples/data``: the Pod Security Standards "restricted"
results of one Pod, as Kyverno writes them)."""

from __future__ import annotations

import copy
from functools import cache
from typing import Any

import yaml

from pipeline.model.resources import ResourceType
from pipeline.model.versions import Progress
from reportsamples.reports import SAMPLE

#: a cluster's failing results as its aggregation agent has counted them, and
#: as its current reports hold them: the same once it has counted every
#: report (until then a fleet may match a count on its way)
COUNTED = ("SELECT (SELECT sum(fail) FROM policy_counts FINAL),"
           " (SELECT sum(fail) FROM reports FINAL WHERE NOT deleted)")


@cache
def _sample() -> dict[str, Any]:
    return yaml.safe_load(SAMPLE.read_text())


def report(rtype: ResourceType, name: str, namespace: str = "", *, fail: int = 0,
           labels: dict[str, str] | None = None) -> dict[str, Any]:
    """A report of ``rtype`` with the sample's 19 results, ``fail`` of them failing."""
    spec = copy.deepcopy(_sample()["spec"])
    results = spec["results"]
    for r in results[:fail]:
        r["result"] = "fail"
    spec["summary"] = {"pass": len(results) - fail, "fail": fail, "warn": 0, "error": 0,
                       "skip": 0}
    meta: dict[str, Any] = {"name": name, "labels": dict(labels or {})}
    if rtype.namespaced:
        meta["namespace"] = namespace
    obj: dict[str, Any] = {"apiVersion": rtype.api_version, "kind": rtype.kind, "metadata": meta}
    if rtype.body_path:
        obj["spec"] = spec
    else:
        obj["scope"] = {"apiVersion": "v1", **{k: spec["owner"][k] for k in
                                               ("kind", "name", "uid")}}
        obj["summary"] = spec["summary"]
        obj["results"] = spec["results"]
    return obj


def collection_path(rtype: ResourceType, namespace: str | None) -> str:
    base = f"/apis/{rtype.group}/{rtype.version}"
    if rtype.namespaced and namespace is not None:
        return f"{base}/namespaces/{namespace}/{rtype.plural}"
    return f"{base}/{rtype.plural}"


class NothingMaterialized:
    """ClickHouse as the change-log cache asks it, with nothing materialized."""

    async def progress(self, topic: str, partition: int = 0) -> Progress | None:
        return None

    async def watermark(self) -> int:
        return 0
