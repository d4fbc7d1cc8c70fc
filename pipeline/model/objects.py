"""Pure helpers over report objects (plain JSON dicts). No I/O."""

from __future__ import annotations

import hashlib
import re
import time
from typing import Any

from pipeline.model.resources import ResourceType, by_kind

JSON = dict[str, Any]

SUMMARY_FIELDS = ("pass", "fail", "warn", "error", "skip")

_LABEL = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_DNS1123_SUBDOMAIN = re.compile(rf"^{_LABEL}(\.{_LABEL})*$")
_DNS1123_LABEL = re.compile(rf"^{_LABEL}$")


def object_key(resource: ResourceType | str, namespace: str, name: str) -> str:
    """Identity of one object: its Kafka key and the unit writes are serialized on."""
    rid = resource if isinstance(resource, str) else resource.id
    return f"{rid}/{namespace}/{name}"


def key_id(key: tuple[str, str, str]) -> int:
    """A key as a 128-bit number (blake2b of its parts): what a set or an
    index of every object holds instead of the key's tuple of three strings,
    48 bytes of memory for the number against about 260 for the tuple. Two of
    a billion keys share one with odds of about 1 in 10**21."""
    digest = hashlib.blake2b("\0".join(key).encode(), digest_size=16).digest()
    return int.from_bytes(digest, "little")


def identity(obj: JSON) -> tuple[str, str, str]:
    """(resource id, namespace, name) of a stored object."""
    meta = metadata(obj)
    rtype = by_kind(str(obj.get("apiVersion")), str(obj.get("kind")))
    return (rtype.id if rtype else "", meta.get("namespace") or "", meta.get("name") or "")


def metadata(obj: JSON) -> JSON:
    meta = obj.get("metadata")
    return meta if isinstance(meta, dict) else {}


def body(resource: ResourceType, obj: JSON) -> JSON:
    """The report body: the object itself, or ``spec`` for ephemeral reports."""
    node: Any = obj
    for part in resource.body_path:
        node = node.get(part) if isinstance(node, dict) else None
    return node if isinstance(node, dict) else {}


def results(resource: ResourceType, obj: JSON) -> list[JSON]:
    res = body(resource, obj).get("results")
    return [r for r in res if isinstance(r, dict)] if isinstance(res, list) else []


def summary(resource: ResourceType, obj: JSON) -> dict[str, int]:
    """Counts per result status: the object's own ``summary`` where it has one,
    otherwise counted from its results."""
    given = body(resource, obj).get("summary")
    if isinstance(given, dict) and given:
        return {f: _int(given.get(f)) for f in SUMMARY_FIELDS}
    counts = dict.fromkeys(SUMMARY_FIELDS, 0)
    for r in results(resource, obj):
        status = r.get("result")
        if status in counts:
            counts[status] += 1
    return counts


def scope(resource: ResourceType, obj: JSON) -> tuple[str, str]:
    """(kind, name) of the resource the report is about, if it says."""
    node = body(resource, obj)
    ref = node.get("owner") if resource.body_path else node.get("scope")
    if isinstance(ref, dict):
        return str(ref.get("kind") or ""), str(ref.get("name") or "")
    return "", ""


def _int(value: Any) -> int:
    try:
        return int(value)
    except (TypeError, ValueError):
        return 0


def name_errors(name: str) -> list[str]:
    """Kubernetes' DNS-1123 subdomain rule for object names."""
    errors = []
    if len(name) > 253:
        errors.append("must be no more than 253 characters")
    if not _DNS1123_SUBDOMAIN.match(name):
        errors.append(
            "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters,"
            " '-' or '.', and must start and end with an alphanumeric character"
        )
    return errors


def namespace_errors(namespace: str) -> list[str]:
    errors = []
    if len(namespace) > 63:
        errors.append("must be no more than 63 characters")
    if not _DNS1123_LABEL.match(namespace):
        errors.append(
            "a lowercase RFC 1123 label must consist of lower case alphanumeric characters"
            " or '-', and must start and end with an alphanumeric character"
        )
    return errors


_second: list[tuple[int, str]] = [(0, "")]


def now_rfc3339() -> str:
    """The time now as Kubernetes writes timestamps (RFC 3339, to the second;
    formatted once a second: every write asks)."""
    now = int(time.time())
    second, text = _second[0]
    if now != second:
        text = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(now))
        _second[0] = (now, text)
    return text
