"""Field ownership, as kube-apiserver's field manager keeps it in
``metadata.managedFields``. Pure: no I/O.

Every write records which manager set which fields: an apply (server-side
apply, operation ``Apply``) owns the fields of its configuration; any other
write (create, update, merge or JSON patch: operation ``Update``) takes the
fields whose values it changed from whoever owned them. An apply that would
change a field another manager owns is a conflict (409, a cause per field and
manager) unless forced, which takes the field; applying the value a field
already has shares it. A field an applier stops applying goes away unless
another manager owns it too.

Maps are granular (``f:<key>``), lists atomic (the report kinds' schemas have
no list-type markers, as in custom resources).
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from pipeline.model.objects import now_rfc3339

JSON = dict[str, Any]
Path = tuple[str, ...]

#: set by the server, never owned
_SYSTEM = {"resourceVersion", "uid", "creationTimestamp", "generation", "managedFields",
           "deletionTimestamp", "deletionGracePeriodSeconds", "selfLink"}
_NOTHING = object()


@dataclass(frozen=True)
class FieldConflict:
    manager: str
    operation: str
    api_version: str
    path: Path

    def field(self) -> str:
        return "." + ".".join(self.path)

    def message(self) -> str:
        who = (f'"{self.manager}"' if self.operation == "Apply"
               else f'"{self.manager}" using {self.api_version}')
        return f"conflict with {who}: {self.field()}"


class Conflicts(Exception):
    """An apply would change fields other managers own."""

    def __init__(self, conflicts: list[FieldConflict]):
        super().__init__("; ".join(c.message() for c in conflicts))
        self.conflicts = conflicts


def _owned(obj: JSON) -> JSON:
    """The object's fields a manager can own (no apiVersion, kind or system
    metadata)."""
    out = {k: v for k, v in obj.items() if k not in ("apiVersion", "kind")}
    if isinstance(out.get("metadata"), dict):
        out["metadata"] = {k: v for k, v in out["metadata"].items() if k not in _SYSTEM}
        if not out["metadata"]:
            del out["metadata"]
    return out


def leaves(value: Any, prefix: Path = ()) -> Iterator[Path]:
    """Paths of the leaves of ``value`` (maps granular, the rest atomic)."""
    if isinstance(value, dict) and (value or not prefix):
        for k, v in value.items():
            yield from leaves(v, (*prefix, k))
    elif prefix:
        yield prefix


def to_fields(paths: set[Path]) -> JSON:
    """``fieldsV1`` of a set of leaf paths."""
    out: JSON = {}
    for path in sorted(paths):
        node = out
        for key in path:
            node = node.setdefault(f"f:{key}", {})
    return out


def from_fields(fields: Any, prefix: Path = ()) -> set[Path]:
    if not isinstance(fields, dict):
        return set()
    out: set[Path] = set()
    for key, sub in fields.items():
        if not key.startswith("f:"):
            continue  # k:, v:, i: and "." entries of list items: lists are atomic here
        path = (*prefix, key[2:])
        out |= from_fields(sub, path) if sub else {path}
    return out


def value_at(obj: Any, path: Path) -> Any:
    for key in path:
        if not isinstance(obj, dict) or key not in obj:
            return _NOTHING
        obj = obj[key]
    return obj


def _remove(obj: JSON, path: Path) -> None:
    *parents, last = path
    node: Any = obj
    for key in parents:
        node = node.get(key) if isinstance(node, dict) else None
        if node is None:
            return
    if isinstance(node, dict):
        node.pop(last, None)


def _overlap(a: Path, b: Path) -> bool:
    shorter = min(len(a), len(b))
    return a[:shorter] == b[:shorter]


def _deep_merge(live: Any, applied: Any) -> Any:
    if isinstance(live, dict) and isinstance(applied, dict):
        out = dict(live)
        for k, v in applied.items():
            out[k] = _deep_merge(live.get(k), v)
        return out
    return copy.deepcopy(applied)


@dataclass
class _Entry:
    manager: str
    operation: str
    api_version: str
    paths: set[Path]
    time: str
    subresource: str = ""

    @classmethod
    def parse(cls, raw: Any) -> _Entry | None:
        if not isinstance(raw, dict) or not raw.get("manager"):
            return None
        return cls(str(raw["manager"]), str(raw.get("operation") or "Update"),
                   str(raw.get("apiVersion") or ""), from_fields(raw.get("fieldsV1")),
                   str(raw.get("time") or ""), str(raw.get("subresource") or ""))

    def render(self) -> JSON:
        out: JSON = {"manager": self.manager, "operation": self.operation,
                     "apiVersion": self.api_version, "time": self.time,
                     "fieldsType": "FieldsV1", "fieldsV1": to_fields(self.paths)}
        if self.subresource:
            out["subresource"] = self.subresource
        return out


def _entries(obj: JSON | None) -> list[_Entry]:
    raw = ((obj or {}).get("metadata") or {}).get("managedFields") or []
    return [e for e in map(_Entry.parse, raw if isinstance(raw, list) else []) if e]


def _render(obj: JSON, entries: list[_Entry]) -> JSON:
    kept = [e.render() for e in entries if e.paths]
    meta = obj.setdefault("metadata", {})
    if kept:
        meta["managedFields"] = kept
    else:
        meta.pop("managedFields", None)
    return obj


def apply(live: JSON | None, applied: JSON, *, manager: str, api_version: str,
          force: bool = False) -> JSON:
    """``applied`` applied for ``manager`` to ``live`` (None: create). Raises
    Conflicts when it would change a field another manager owns, unless
    ``force`` (which takes the field from them)."""
    applied = copy.deepcopy(applied)
    meta = applied.get("metadata")
    if isinstance(meta, dict):
        for key in _SYSTEM:
            meta.pop(key, None)
    mine = set(leaves(_owned(applied)))
    entries = _entries(live)
    previous = next((e for e in entries if e.manager == manager and e.operation == "Apply"),
                    None)
    others = [e for e in entries if e is not previous]
    conflicts = []
    for entry in others:
        for owned in entry.paths:
            for path in mine:
                if not _overlap(owned, path):
                    continue
                if owned == path:
                    differs = value_at(live, path) != value_at(applied, path)
                else:  # a map one side owns whole, the other a key of: only
                    # a field that is not a map (any more) changes
                    differs = not isinstance(value_at(live, min(owned, path, key=len)), dict)
                if differs:
                    conflicts.append(FieldConflict(entry.manager, entry.operation,
                                                   entry.api_version, owned))
                    break
    if conflicts and not force:
        raise Conflicts(sorted(set(conflicts), key=lambda c: (c.manager, c.path)))
    for entry in others:  # forced: the conflicting fields are the applier's now
        taken = {c.path for c in conflicts if c.manager == entry.manager
                 and c.operation == entry.operation}
        entry.paths -= taken
    result = copy.deepcopy(live) if live is not None else {}
    if previous is not None:  # fields it no longer applies, unless others own them
        still = set().union(*(e.paths for e in others)) if others else set()
        for path in previous.paths - mine:
            # (another's map above it is not this field's owner)
            if not any(o[:len(path)] == path for o in still):
                _remove(result, path)
    result = _deep_merge(result, applied)
    entry = _Entry(manager, "Apply", api_version, mine, now_rfc3339())
    return _render(result, [*others, entry])


def update(live: JSON | None, new: JSON, *, manager: str, api_version: str) -> JSON:
    """``new``, written by ``manager`` with an ordinary write (create,
    update, merge or JSON patch) over ``live``, with the managed fields
    kube-apiserver records: the fields whose values it changed are the
    manager's, taken from whoever owned them; fields that are gone are no
    one's. managedFields the write sets itself are kept as given."""
    new_meta = new.get("metadata") or {}
    live_meta = (live or {}).get("metadata") or {}
    if "managedFields" in new_meta and new_meta.get("managedFields") != live_meta.get(
            "managedFields"):
        return new  # the client resets or replaces them
    entries = _entries(live)
    present = set(leaves(_owned(new)))
    changed = {p for p in present if live is None or value_at(live, p) != value_at(new, p)}
    def taken(path: Path) -> bool:  # changed by this write, or gone with it
        if value_at(new, path) is _NOTHING:
            return True
        return any(path[:len(c)] == c or (c[:len(path)] == path
                                           and not isinstance(value_at(new, path), dict))
                   for c in changed)

    for entry in entries:
        entry.paths = {p for p in entry.paths if not taken(p)}
    if changed:
        mine = next((e for e in entries if e.manager == manager and e.operation == "Update"
                     and e.api_version == api_version), None)
        if mine is None:
            mine = _Entry(manager, "Update", api_version, set(), now_rfc3339())
            entries.append(mine)
        mine.paths |= changed
        mine.time = now_rfc3339()
    return _render({**new, "metadata": dict(new_meta)}, entries)


def manager_from_user_agent(user_agent: str) -> str:
    """The manager of a write that names none, as kube-apiserver derives it:
    the user agent up to its first ``/`` (at most 128 characters)."""
    return (user_agent.split("/", 1)[0] or "unknown")[:128]
