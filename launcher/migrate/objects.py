"""What moving reports between two Kubernetes APIs keeps, and what each
object's copy does. Pure: no I/O (``launcher.migrate.transfer`` does the requests).

A copy keeps an object's name, namespace, labels, annotations,
ownerReferences, finalizers and every field outside ``metadata``. The
destination gives it a new uid, resourceVersion, creationTimestamp and
generation, as kube-apiserver does on every create. An ownerReference that
points at a report which is copied too is rewritten to that report's new uid
(the garbage collector would otherwise take the owner for gone and delete
the copy); one that points at anything else (a Pod, a Namespace) stays as it
is, since those objects do not move.
"""

from __future__ import annotations

import hashlib
from collections import Counter, defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson

from pipeline.model.resources import ResourceType, by_kind

JSON = dict[str, Any]
#: metadata a copy keeps; the destination sets the rest.
KEPT_METADATA = ("name", "namespace", "labels", "annotations", "ownerReferences", "finalizers")


@dataclass(frozen=True)
class Key:
    resource: str  # ResourceType.id
    namespace: str
    name: str

    def __str__(self) -> str:
        where = f"{self.namespace}/" if self.namespace else ""
        return f"{self.resource} {where}{self.name}"


def key_of(resource: ResourceType, obj: JSON) -> Key:
    meta = obj.get("metadata") or {}
    return Key(resource.id, meta.get("namespace", "") if resource.namespaced else "",
               meta.get("name", ""))


def owned_by_reports(obj: JSON) -> bool:
    """Whether an ownerReference points at one of the report kinds (whose
    uids change on the way)."""
    refs = (obj.get("metadata") or {}).get("ownerReferences") or []
    return any(by_kind(r.get("apiVersion", ""), r.get("kind", "")) is not None for r in refs)


def copy_body(resource: ResourceType, obj: JSON, uids: Mapping[str, str]) -> JSON:
    """The body that creates ``obj``'s copy: its content and kept metadata,
    report owners' uids mapped to their copies' (``uids``: old -> new)."""
    meta = obj.get("metadata") or {}
    kept: JSON = {k: meta[k] for k in KEPT_METADATA if meta.get(k) not in (None, {}, [])}
    if not resource.namespaced:
        kept.pop("namespace", None)
    if "ownerReferences" in kept:
        kept["ownerReferences"] = [
            {**ref, "uid": uids.get(ref.get("uid", ""), ref.get("uid", ""))}
            if by_kind(ref.get("apiVersion", ""), ref.get("kind", "")) is not None else ref
            for ref in kept["ownerReferences"]]
    body: JSON = {k: v for k, v in obj.items() if k not in ("metadata", "apiVersion", "kind")}
    return {"apiVersion": resource.api_version, "kind": resource.kind, "metadata": kept, **body}


def digest(body: JSON) -> str:
    """What two copies are compared by: the kept metadata and the content."""
    meta = body.get("metadata") or {}
    kept = {k: meta[k] for k in KEPT_METADATA if meta.get(k) not in (None, {}, [])}
    content = {k: v for k, v in body.items() if k not in ("metadata", "apiVersion", "kind")}
    raw = orjson.dumps({"metadata": kept, **content}, option=orjson.OPT_SORT_KEYS)
    return hashlib.sha256(raw).hexdigest()


@dataclass
class Present:
    """An object as the destination holds it."""
    uid: str
    resource_version: str
    digest: str

    @classmethod
    def of(cls, obj: JSON) -> Present:
        meta = obj.get("metadata") or {}
        return cls(meta.get("uid", ""), meta.get("resourceVersion", ""), digest(obj))


# -- what became of each object ----------------------------------------------

COPIED, UPDATED, UNCHANGED, KEPT, SKIPPED, FAILED, DELETED = (
    "copied", "updated", "unchanged", "kept", "skipped", "failed", "deleted")
#: copied: created at the destination; updated: the destination's copy
#: differed and was replaced; unchanged: the destination held the same; kept:
#: the destination's own (newer) object was left as it is; deleted: gone from
#: the source since it was copied, and so from the destination; skipped: not
#: copied (the reason is given); failed: the destination refused it
OUTCOMES = (COPIED, UPDATED, UNCHANGED, KEPT, DELETED, SKIPPED, FAILED)


@dataclass
class Tally:
    """Outcomes per resource, and the reasons of skips and failures."""
    counts: dict[str, Counter[str]] = field(default_factory=lambda: defaultdict(Counter))
    reasons: list[tuple[Key, str, str]] = field(default_factory=list)
    #: what went wrong beside single objects
    notes: list[str] = field(default_factory=list)

    def add(self, key: Key, outcome: str, reason: str = "") -> None:
        self.counts[key.resource][outcome] += 1
        if outcome in (SKIPPED, FAILED):
            self.reasons.append((key, outcome, reason))

    def total(self, outcome: str) -> int:
        return sum(c[outcome] for c in self.counts.values())

    @property
    def seen(self) -> int:
        return sum(sum(c.values()) for c in self.counts.values())

    def lines(self, resources: Sequence[ResourceType], *, reasons_shown: int = 20
              ) -> list[str]:
        """The summary: a row per resource, totals, and why objects were
        skipped or failed (the first ``reasons_shown``)."""
        width = max(len(r.plural) for r in resources) if resources else 10
        head = f"{'':<{width}}  " + " ".join(f"{o:>9}" for o in OUTCOMES)
        rows = [head]
        for r in resources:
            c = self.counts.get(r.id, Counter())
            rows.append(f"{r.plural:<{width}}  " + " ".join(f"{c[o]:>9}" for o in OUTCOMES))
        rows.append(f"{'total':<{width}}  " + " ".join(f"{self.total(o):>9}"
                                                     for o in OUTCOMES))
        rows += [f"note: {note}" for note in self.notes]
        if self.reasons:
            rows.append("")
            for key, outcome, reason in self.reasons[:reasons_shown]:
                rows.append(f"{outcome}: {key}: {reason}")
            if len(self.reasons) > reasons_shown:
                rows.append(f"... and {len(self.reasons) - reasons_shown} more")
        return rows
