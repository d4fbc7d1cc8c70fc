"""Patches of every kind a custom resource accepts: JSON merge patch (RFC 7386),
JSON patch (RFC 6902, via the ``jsonpatch`` library) and server-side apply.
Strategic merge patch is refused, as for custom resources. Pure."""

from __future__ import annotations

import copy
from typing import Any

import jsonpatch
import orjson
import yaml

from apiserver.contract.errors import BadRequest, Conflict, Invalid, UnsupportedMediaType, cause
from pipeline.model import managedfields

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

def apply(live: JSON | None, applied: JSON, *, manager: str, api_version: str,
          force: bool = False) -> JSON:
    """Apply ``applied`` for ``manager`` to ``live`` (None: create): 409 with
    a cause per field when another manager owns a field it would change,
    unless ``force``."""
    if not manager:
        raise Invalid("PatchOptions.meta.k8s.io is invalid: fieldManager: Required value: is"
                      " required for apply patch",
                      causes=[cause("fieldManager", "Required value: is required for apply"
                                    " patch", "FieldValueRequired")])
    try:
        return managedfields.apply(live, applied, manager=manager, api_version=api_version,
                                   force=force)
    except managedfields.Conflicts as err:
        found = err.conflicts
        what = "1 conflict" if len(found) == 1 else f"{len(found)} conflicts"
        raise Conflict(f"Apply failed with {what}: " + "\n".join(c.message() for c in found),
                       causes=[cause(c.field(), c.message().rsplit(":", 1)[0],
                                     "FieldManagerConflict") for c in found]) from None
