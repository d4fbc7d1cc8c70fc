"""Patches of every kind a custom resource accepts: JSON merge patch (RFC 7386),
JSON patch (RFC 6902, via the ``jsonpatch`` library) and server-side apply.
Strategic merge patch is refused, as for custom resources. Pure."""

from __future__ import annotations

import copy
from datetime import UTC, datetime
from typing import Any

import jsonpatch
import orjson
import yaml

from apiserver.errors import BadRequest, Invalid, UnsupportedMediaType, cause

JSON = dict[str, Any]
MERGE = "application/merge-patch+json"
JSON_PATCH = "application/json-patch+json"
APPLY = "application/apply-patch+yaml"
STRATEGIC = "application/strategic-merge-patch+json"
PATCH_TYPES = (MERGE, JSON_PATCH, APPLY)


def parse(content_type: str, raw: bytes) -> Any:
    if content_type == STRATEGIC:
        raise UnsupportedMediaType(
            "strategic merge patch is not supported for custom resources: use"
            " application/merge-patch+json, application/json-patch+json or server-side apply")
    if content_type not in PATCH_TYPES:
        raise UnsupportedMediaType(f"the body of the request was in an unknown format -"
                                   f" accepted media types include: {', '.join(PATCH_TYPES)}")
    try:
        value = yaml.safe_load(raw) if content_type == APPLY else orjson.loads(raw)
    except (yaml.YAMLError, orjson.JSONDecodeError) as err:
        raise BadRequest(f"the patch is not valid: {err}") from err
    if content_type == JSON_PATCH:
        if not isinstance(value, list):
            raise BadRequest("a JSON patch must be an array of operations")
    elif not isinstance(value, dict):
        raise BadRequest("the patch must be an object")
    return value


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    out = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = merge_patch(out.get(key), value)
    return out


def json_patch(target: JSON, ops: list[Any]) -> JSON:
    try:
        result = jsonpatch.apply_patch(target, ops)
    except (jsonpatch.JsonPatchException, jsonpatch.JsonPointerException, TypeError,
            KeyError, IndexError, ValueError) as err:
        raise Invalid(f"the JSON patch could not be applied: {err}",
                      causes=[cause("", str(err))]) from err
    if not isinstance(result, dict):
        raise BadRequest("the JSON patch did not produce an object")
    return result


# -- server-side apply -------------------------------------------------------

def field_set(value: Any) -> JSON:
    """The ``fieldsV1`` set of an applied configuration: maps are granular,
    lists atomic (custom resources without list-type markers)."""
    if not isinstance(value, dict):
        return {}
    return {f"f:{k}": field_set(v) for k, v in value.items()}


def _remove(target: JSON, fields: JSON) -> None:
    for fkey, sub in fields.items():
        key = fkey[2:]
        if key not in target:
            continue
        if sub and isinstance(target[key], dict):
            _remove(target[key], sub)
        else:
            del target[key]


def _minus(old: JSON, new: JSON) -> JSON:
    """Fields in ``old`` that ``new`` no longer has (leaves only)."""
    out: JSON = {}
    for fkey, sub in old.items():
        if fkey not in new:
            out[fkey] = {}
        elif sub:
            rest = _minus(sub, new[fkey])
            if rest:
                out[fkey] = rest
    return out


def _deep_merge(live: Any, applied: Any) -> Any:
    if isinstance(live, dict) and isinstance(applied, dict):
        out = dict(live)
        for k, v in applied.items():
            out[k] = _deep_merge(live.get(k), v)
        return out
    return copy.deepcopy(applied)


_APPLY_IGNORED = ("metadata.resourceVersion", "metadata.uid", "metadata.creationTimestamp",
                  "metadata.generation", "metadata.managedFields")


def _strip_system(applied: JSON) -> JSON:
    out = dict(applied)
    meta = dict(out.get("metadata") or {})
    for path in _APPLY_IGNORED:
        meta.pop(path.split(".", 1)[1], None)
    out["metadata"] = meta
    return out


def apply(live: JSON | None, applied: JSON, *, manager: str, api_version: str) -> JSON:
    """Apply ``applied`` for ``manager`` to ``live`` (None: create)."""
    if not manager:
        raise Invalid("PatchOptions.meta.k8s.io is invalid: fieldManager: Required value: is"
                      " required for apply patch",
                      causes=[cause("fieldManager", "Required value: is required for apply"
                                    " patch", "FieldValueRequired")])
    applied = _strip_system(applied)
    fields = field_set({k: v for k, v in applied.items() if k not in ("apiVersion", "kind")})
    entries = [] if live is None else list((live.get("metadata") or {}).get("managedFields")
                                           or [])
    previous = next((e for e in entries if e.get("manager") == manager and
                     e.get("operation") == "Apply"), None)
    result = copy.deepcopy(live) if live is not None else {}
    if previous is not None:
        _remove(result, _minus(previous.get("fieldsV1") or {}, fields))
    result = _deep_merge(result, applied)
    entry = {"manager": manager, "operation": "Apply", "apiVersion": api_version,
             "time": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"), "fieldsType": "FieldsV1",
             "fieldsV1": fields}
    others = [e for e in entries if e is not previous]
    result.setdefault("metadata", {})["managedFields"] = [*others, entry]
    return result
