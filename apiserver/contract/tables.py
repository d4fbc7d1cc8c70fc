"""Table and metadata-only representations, as the kube-apiserver renders them
for custom resources. Pure."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import UTC, datetime
from typing import Any

from pipeline.clickhouse.rows import parse_time
from pipeline.model import objects
from pipeline.model.resources import ResourceType

JSON = dict[str, Any]

COLUMNS: list[JSON] = [
    {"name": "Name", "type": "string", "format": "name", "priority": 0,
     "description": "Name must be unique within a namespace."},
    {"name": "Kind", "type": "string", "format": "", "priority": 0,
     "description": "Kind of the resource the report is about."},
    {"name": "Name", "type": "string", "format": "", "priority": 0,
     "description": "Name of the resource the report is about."},
    *({"name": f.capitalize(), "type": "integer", "format": "", "priority": 0,
       "description": f"Number of {f} results."} for f in objects.SUMMARY_FIELDS),
    {"name": "Age", "type": "date", "format": "", "priority": 0,
     "description": "Time since the report was created."},
    {"name": "Policies", "type": "integer", "format": "", "priority": 1,
     "description": "Number of distinct policies with results."},
    {"name": "Source", "type": "string", "format": "", "priority": 1,
     "description": "Policy engines that produced the results."},
]


def now() -> datetime:
    return datetime.now(UTC)


def human_duration(seconds: float) -> str:
    """Kubernetes' ``duration.HumanDuration``."""
    s = int(seconds)
    if s < 0:
        return "<invalid>"
    if s < 120:
        return f"{s}s"
    m = s // 60
    if m < 10:
        rem = s % 60
        return f"{m}m{rem}s" if rem else f"{m}m"
    if m < 180:
        return f"{m}m"
    h = s // 3600
    if h < 8:
        rem = m % 60
        return f"{h}h{rem}m" if rem else f"{h}h"
    if h < 48:
        return f"{h}h"
    if h < 192:
        rem = h % 24
        return f"{h // 24}d{rem}h" if rem else f"{h // 24}d"
    if h < 24 * 365 * 2:
        return f"{h // 24}d"
    if h < 24 * 365 * 8:
        days = h // 24 - (h // 24 // 365) * 365
        return f"{h // 24 // 365}y{days}d" if days else f"{h // 24 // 365}y"
    return f"{h // 24 // 365}y"


def partial_metadata(obj: JSON) -> JSON:
    return {"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1",
            "metadata": objects.metadata(obj)}


def row(rtype: ResourceType, obj: JSON, now: datetime) -> JSON:
    meta = objects.metadata(obj)
    counts = objects.summary(rtype, obj)
    kind, name = objects.scope(rtype, obj)
    created = parse_time(meta.get("creationTimestamp"))
    age = human_duration((now - created).total_seconds()) if meta.get("creationTimestamp") \
        else "<unknown>"
    results = objects.results(rtype, obj)
    policies = len({r.get("policy") for r in results})
    sources = ",".join(sorted({str(r.get("source")) for r in results if r.get("source")}))
    return {"cells": [meta.get("name", ""), kind, name,
                      *(counts[f] for f in objects.SUMMARY_FIELDS), age, policies, sources],
            "object": partial_metadata(obj)}


def table(rtype: ResourceType, items: Iterable[JSON], *, resource_version: str,
          continue_token: str = "") -> JSON:
    current = now()
    meta: JSON = {"resourceVersion": resource_version}
    if continue_token:
        meta["continue"] = continue_token
    return {"kind": "Table", "apiVersion": "meta.k8s.io/v1", "metadata": meta,
            "columnDefinitions": COLUMNS, "rows": [row(rtype, o, current) for o in items]}
