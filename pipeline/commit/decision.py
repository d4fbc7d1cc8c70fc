"""Deciding one write against the current state of its object. Pure: no I/O.

The committer agent owns every key, calls :func:`decide` for each request in
order, and publishes what it returns. Everything random or time-dependent comes
in through the request (``now`` from the frontend, the uid derived from the
request id), so deciding the same request twice gives the same answer:
redelivery of a request is harmless.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

import orjson

from pipeline.model import managedfields, objects, resources
from pipeline.model.messages import Change, Reply, WriteRequest
from pipeline.model.versions import Current

JSON = dict[str, Any]
_UID_NAMESPACE = uuid.UUID("6f1c2a8e-5b7d-4c1e-9a55-0d7b3f6e2c91")
_SYSTEM_FIELDS = ("uid", "creationTimestamp", "deletionTimestamp", "generation", "resourceVersion")


@dataclass(frozen=True)
class Decision:
    reply: Reply
    change: Change | None = None


def status(code: int, reason: str, message: str, *, resource: str = "", name: str = "",
           causes: list[JSON] | None = None) -> JSON:
    rtype = resources.by_id(resource) if resource else None
    details: JSON = {}
    if name:
        details["name"] = name
    if rtype:
        details["group"] = rtype.group
        details["kind"] = rtype.plural
    if causes:
        details["causes"] = causes
    out: JSON = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                 "message": message, "reason": reason, "code": code}
    if details:
        out["details"] = details
    return out


def _qualified(req: WriteRequest) -> str:
    rtype = resources.by_id(req.resource)
    return f'{rtype.plural}.{rtype.group} "{req.name}"'


def not_found(req: WriteRequest) -> JSON:
    return status(404, "NotFound", f"{_qualified(req)} not found", resource=req.resource,
                  name=req.name)


def conflict(req: WriteRequest, why: str) -> JSON:
    return status(409, "Conflict", f"Operation cannot be fulfilled on {_qualified(req)}: {why}",
                  resource=req.resource, name=req.name)


def decide(req: WriteRequest, current: Current | None, next_rv: int) -> Decision:
    """The outcome of ``req`` given the key's ``current`` state; a change, if
    any, takes resourceVersion ``next_rv``."""
    if current is not None and current.request_id == req.id:
        # Redelivered request: answer as the first time, publish nothing.
        return Decision(Reply(req.id, current.resource_version, obj=current.obj))
    live = current if current is not None and not current.deleted else None
    if req.op == "create":
        return _create(req, live, next_rv)
    if live is None:
        return Decision(Reply(req.id, 0, status=not_found(req)))
    if req.op == "update":
        return _update(req, live, next_rv)
    return _delete(req, live, next_rv)


def _with_meta(obj: JSON, **fields: Any) -> JSON:
    out = dict(obj)
    meta = dict(objects.metadata(obj))
    for k, v in fields.items():
        if v is None:
            meta.pop(k, None)
        else:
            meta[k] = v
    out["metadata"] = meta
    return out


def _managed(req: WriteRequest, live: JSON | None) -> JSON:
    """The written object with the managed fields of its write: an ordinary
    write's manager takes the fields it changed (an apply's came set)."""
    assert req.obj is not None
    if not req.manager or req.applied:
        return req.obj
    return managedfields.update(live, req.obj, manager=req.manager,
                                api_version=str(req.obj.get("apiVersion") or ""))


def _create(req: WriteRequest, live: Current | None, rv: int) -> Decision:
    if live is not None:
        return Decision(Reply(req.id, 0, status=status(
            409, "AlreadyExists", f"{_qualified(req)} already exists",
            resource=req.resource, name=req.name)))
    assert req.obj is not None
    obj = _with_meta(_managed(req, None), uid=str(uuid.uuid5(_UID_NAMESPACE, req.id)),
                     creationTimestamp=req.now, generation=1, resourceVersion=str(rv),
                     deletionTimestamp=None)
    return _commit(req, "ADDED", obj, rv, 0)


def _update(req: WriteRequest, live: Current, rv: int) -> Decision:
    assert req.obj is not None
    given = objects.metadata(req.obj).get("resourceVersion")
    if given and given != str(live.resource_version):
        return Decision(Reply(req.id, 0, status=conflict(
            req, "the object has been modified; please apply your changes to the latest"
                 " version and try again")))
    old = live.obj
    old_meta = objects.metadata(old)
    generation = int(old_meta.get("generation") or 1)
    if _spec(req.obj) != _spec(old):
        generation += 1
    obj = _with_meta(_managed(req, old), **{f: old_meta.get(f) for f in _SYSTEM_FIELDS})
    obj = _with_meta(obj, generation=generation, resourceVersion=str(rv))
    meta = objects.metadata(obj)
    if meta.get("deletionTimestamp") and not meta.get("finalizers"):
        return _commit(req, "DELETED", obj, rv, live.resource_version)
    return _commit(req, "MODIFIED", obj, rv, live.resource_version)


def _delete(req: WriteRequest, live: Current, rv: int) -> Decision:
    old = live.obj
    meta = objects.metadata(old)
    pre = req.preconditions
    if pre.get("uid") and pre["uid"] != meta.get("uid"):
        return Decision(Reply(req.id, 0, status=conflict(
            req, f"Precondition failed: UID in precondition: {pre['uid']},"
                 f" UID in object meta: {meta.get('uid')}")))
    if pre.get("resourceVersion") and pre["resourceVersion"] != str(live.resource_version):
        return Decision(Reply(req.id, 0, status=conflict(
            req, f"Precondition failed: ResourceVersion in precondition:"
                 f" {pre['resourceVersion']}, ResourceVersion in object meta:"
                 f" {live.resource_version}")))
    finalizers = list(meta.get("finalizers") or [])
    added = bool(req.finalizer) and req.finalizer not in finalizers
    if added:
        # the garbage collector's, for a Foreground or Orphan deletion
        finalizers.append(req.finalizer)
    if finalizers:
        if meta.get("deletionTimestamp") and not added:
            return Decision(Reply(req.id, live.resource_version, obj=old))
        obj = _with_meta(old, deletionTimestamp=meta.get("deletionTimestamp") or req.now,
                         finalizers=finalizers, resourceVersion=str(rv))
        return _commit(req, "MODIFIED", obj, rv, live.resource_version)
    obj = _with_meta(old, resourceVersion=str(rv))
    return _commit(req, "DELETED", obj, rv, live.resource_version)


def _commit(req: WriteRequest, etype: str, obj: JSON, rv: int, previous: int) -> Decision:
    """A change, answered by its resourceVersion alone: the writer reads the
    object from the change log (replies stay small). ``previous``: the
    object's version before it (0: none), for lists served as of a version."""
    change = Change(etype, obj, rv, req.id, previous)  # type: ignore[arg-type]
    return Decision(Reply(req.id, rv), change)


def _spec(obj: JSON) -> JSON:
    return {k: v for k, v in obj.items() if k not in ("metadata", "status", "apiVersion", "kind")}


def current_after(change: Change) -> Current:
    return Current(change.resource_version, orjson.dumps(change.obj), change.type == "DELETED",
                   change.request_id)



def dry(decision: Decision) -> Decision:
    """What a dry run answers: the outcome, with nothing to publish and no
    resourceVersion spent."""
    reply = decision.reply
    if decision.change is None:
        return Decision(reply)
    obj = _with_meta(decision.change.obj, resourceVersion=None)
    return Decision(Reply(reply.request_id, 0, obj=obj))
