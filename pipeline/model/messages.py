"""Wire formats of the pipeline's topics, as frozen dataclasses with JSON codecs.

- requests topic (internal): a write the frontend asks the committer to decide;
- replies topic (internal): the committer's answer to one request;
- changes topic (public): every committed write as a Kubernetes watch event,
  ``{"type": "ADDED"|"MODIFIED"|"DELETED", "object": {...}}``, keyed by the
  object's identity, the object carrying its ``metadata.resourceVersion``.

Pure: no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

import orjson

JSON = dict[str, Any]
Op = Literal["create", "update", "delete"]
EventType = Literal["ADDED", "MODIFIED", "DELETED"]


class DecodeError(ValueError):
    """A record on a topic could not be decoded."""


def _loads(raw: bytes) -> JSON:
    try:
        value = orjson.loads(raw)
    except orjson.JSONDecodeError as err:
        raise DecodeError(str(err)) from err
    if not isinstance(value, dict):
        raise DecodeError("record is not a JSON object")
    return value


@dataclass(frozen=True, kw_only=True)
class WriteRequest:
    """A write the frontend asks the committer to decide: what it builds and
    hands its ``WriteSubmitter`` (``apiserver.storage.ports``), and what the requests
    topic carries."""

    op: Op
    resource: str
    namespace: str
    name: str
    #: when the frontend submitted the write (RFC 3339; the object's
    #: timestamps), the request's id (its reply carries it) and the topic that
    #: reply goes to: each set as the request is sent.
    now: str = ""
    id: str = ""
    reply_to: str = ""
    obj: JSON | None = None
    preconditions: JSON = field(default_factory=dict)
    #: Decide and answer, but commit nothing (``dryRun=All``).
    dry_run: bool = False
    #: a delete's garbage-collector finalizer to add (``foregroundDeletion`` or
    #: ``orphan``, from its propagation policy), or ""
    finalizer: str = ""
    #: the field manager of a create or update (its managedFields entry)
    manager: str = ""
    #: the object is a server-side apply's result, its managedFields set
    applied: bool = False

    def encode(self) -> bytes:
        return orjson.dumps({
            "id": self.id, "op": self.op, "resource": self.resource,
            "namespace": self.namespace, "name": self.name, "replyTo": self.reply_to,
            "now": self.now, "object": self.obj, "preconditions": self.preconditions,
            "dryRun": self.dry_run, "finalizer": self.finalizer,
            "manager": self.manager, "applied": self.applied,
        })

    @classmethod
    def decode(cls, raw: bytes) -> WriteRequest:
        v = _loads(raw)
        try:
            return cls(id=v["id"], op=v["op"], resource=v["resource"], namespace=v["namespace"],
                       name=v["name"], reply_to=v["replyTo"], now=v["now"], obj=v.get("object"),
                       preconditions=v.get("preconditions") or {},
                       dry_run=bool(v.get("dryRun")), finalizer=v.get("finalizer") or "",
                       manager=v.get("manager") or "", applied=bool(v.get("applied")))
        except KeyError as err:
            raise DecodeError(f"request lacks {err}") from err


@dataclass(frozen=True)
class Reply:
    """``status`` is None on success, otherwise a Kubernetes ``Status`` dict.
    A success that committed a change carries no ``obj``: the change log has
    it at ``resource_version``. Otherwise (a dry run, a request decided
    before) ``obj`` is the object."""

    request_id: str
    resource_version: int
    obj: JSON | None = None
    status: JSON | None = None

    def encode(self) -> bytes:
        out: JSON = {"requestId": self.request_id, "resourceVersion": self.resource_version}
        if self.obj is not None:
            out["object"] = self.obj
        if self.status is not None:
            out["status"] = self.status
        return orjson.dumps(out)

    @classmethod
    def decode(cls, raw: bytes) -> Reply:
        v = _loads(raw)
        try:
            return cls(request_id=v["requestId"], resource_version=int(v["resourceVersion"]),
                       obj=v.get("object"), status=v.get("status"))
        except (KeyError, TypeError, ValueError) as err:
            raise DecodeError(f"bad reply: {err}") from err


@dataclass(frozen=True)
class Change:
    """One committed write: a watch event for the public change log."""

    type: EventType
    obj: JSON
    resource_version: int
    request_id: str = ""
    #: the object's resourceVersion before this change (0: it did not exist);
    #: carried in the record's ``previous-resource-version`` header
    previous: int = 0

    def encode(self) -> bytes:
        return orjson.dumps({"type": self.type, "object": self.obj})

    @staticmethod
    def object_json(raw: bytes) -> bytes | None:
        """The object's JSON inside an encoded change (what ``encode`` wrote),
        without parsing it; None for any other layout."""
        for etype in (b"ADDED", b"MODIFIED", b"DELETED"):
            head = b'{"type":"%s","object":' % etype
            if raw.startswith(head) and raw.endswith(b"}"):
                return raw[len(head):-1]
        return None

    @classmethod
    def decode(cls, raw: bytes, request_id: str = "", previous: int = 0) -> Change:
        v = _loads(raw)
        try:
            obj = v["object"]
            rv = int(obj["metadata"]["resourceVersion"])
            return cls(type=v["type"], obj=obj, resource_version=rv, request_id=request_id,
                       previous=previous)
        except (KeyError, TypeError, ValueError) as err:
            raise DecodeError(f"bad change: {err}") from err


REQUEST_ID_HEADER = "request-id"
PREVIOUS_HEADER = "previous-resource-version"


def change_headers(change: Change) -> list[tuple[str, bytes]]:
    """The headers of a change's record: the request that made it, and the
    object's version before it."""
    return [(REQUEST_ID_HEADER, change.request_id.encode()),
            (PREVIOUS_HEADER, str(change.previous).encode())]
