"""Checking an incoming object against the request that carries it. Pure."""

from __future__ import annotations

import secrets
from typing import Any

import orjson

from apiserver.errors import BadRequest, cause, invalid
from pipeline import objects
from pipeline.resources import ResourceType

JSON = dict[str, Any]
_SUFFIX_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"


def parse_body(raw: bytes) -> JSON:
    try:
        value = orjson.loads(raw)
    except orjson.JSONDecodeError as err:
        raise BadRequest(f"the request body is not valid JSON: {err}") from err
    if not isinstance(value, dict):
        raise BadRequest("the request body must be a JSON object")
    return value


def generated_name(prefix: str) -> str:
    return prefix + "".join(secrets.choice(_SUFFIX_ALPHABET) for _ in range(5))


def check_object(rtype: ResourceType, obj: JSON, *, namespace: str | None,
                 name: str | None) -> JSON:
    """Validate ``obj`` for a write to ``rtype`` at the URL's namespace and name
    (name is None for create). Returns the object with defaults filled in."""
    api_version, kind = obj.get("apiVersion"), obj.get("kind")
    if api_version != rtype.api_version or kind != rtype.kind:
        raise BadRequest(
            f"the API version and kind in the data ({api_version}, {kind}) do not match the"
            f" expected ({rtype.api_version}, {rtype.kind})")
    meta = obj.get("metadata")
    if meta is None:
        meta = {}
    if not isinstance(meta, dict):
        raise BadRequest("metadata must be an object")
    meta = dict(meta)
    if rtype.namespaced:
        given_ns = meta.get("namespace")
        if given_ns and given_ns != namespace:
            raise BadRequest("the namespace of the provided object does not match the namespace"
                             " sent on the request")
        meta["namespace"] = namespace
    else:
        meta.pop("namespace", None)
    given_name = meta.get("name")
    if name is not None and given_name != name:
        raise BadRequest(f"the name of the object ({given_name}) does not match the name on"
                         f" the URL ({name})")
    causes: list[JSON] = []
    if not given_name:
        prefix = meta.get("generateName")
        if name is None and isinstance(prefix, str) and prefix:
            meta["name"] = given_name = generated_name(prefix)
        else:
            causes.append(cause("metadata.name", "Required value: name or generateName is"
                                " required", "FieldValueRequired"))
    if given_name:
        if not isinstance(given_name, str):
            causes.append(cause("metadata.name", "must be a string"))
        else:
            causes += [cause("metadata.name", f'Invalid value: "{given_name}": {e}')
                       for e in objects.name_errors(given_name)]
    for field in ("labels", "annotations"):
        value = meta.get(field)
        if value is not None and not (isinstance(value, dict) and
                                      all(isinstance(v, str) for v in value.values())):
            causes.append(cause(f"metadata.{field}", "must be a map of string to string",
                                "FieldValueTypeInvalid"))
    if causes:
        raise invalid(rtype.kind, str(given_name or ""), rtype.group, causes)
    out = dict(obj)
    out["metadata"] = meta
    return out


def check_namespace(namespace: str) -> None:
    errors = objects.namespace_errors(namespace)
    if errors:
        raise BadRequest(f'invalid namespace "{namespace}": {errors[0]}')


