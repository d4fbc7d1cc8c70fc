"""Checking an incoming object against the request that carries it. Pure."""

from __future__ import annotations

import secrets
from typing import Any

import orjson

from apiserver.contract import schema
from apiserver.contract.errors import BadRequest, cause, invalid
from apiserver.contract.selectors import label_key_errors, label_value_errors
from pipeline.model import objects
from pipeline.model.resources import ResourceType

JSON = dict[str, Any]
_SUFFIX_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"
ANNOTATIONS_MAX = 256 * 1024


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
                 name: str | None, known: bool = False) -> JSON:
    """Validate ``obj`` for a write to ``rtype`` at the URL's namespace and name
    (name is None for create). Returns the object with defaults filled in.
    ``known``: ``schema.surely_known`` found it valid (its body is not
    checked again)."""
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
    causes += _metadata_causes(meta)
    if not known:
        causes += schema.causes(rtype, obj)
    if causes:
        raise invalid(rtype.kind, str(given_name or ""), rtype.group, causes)
    out = dict(obj)
    out["metadata"] = meta
    return out


def check_namespace(namespace: str) -> None:
    errors = objects.namespace_errors(namespace)
    if errors:
        raise BadRequest(f'invalid namespace "{namespace}": {errors[0]}')




def _metadata_causes(meta: JSON) -> list[JSON]:
    """Kubernetes' rules for labels, annotations, finalizers and owner references."""
    causes: list[JSON] = []
    for field in ("labels", "annotations"):
        value = meta.get(field)
        if value is None:
            continue
        if not (isinstance(value, dict) and all(isinstance(v, str) for v in value.values())):
            causes.append(cause(f"metadata.{field}", "must be a map of string to string",
                                "FieldValueTypeInvalid"))
            continue
        for key, val in value.items():
            for err in label_key_errors(key):
                causes.append(cause(f"metadata.{field}", f'Invalid value: "{key}": {err}'))
            if field == "labels":
                for err in label_value_errors(val):
                    causes.append(cause("metadata.labels", f'Invalid value: "{val}": {err}'))
        if field == "annotations" and sum(len(k) + len(v) for k, v in value.items()) > \
                ANNOTATIONS_MAX:
            causes.append(cause("metadata.annotations", "Too long: must have at most"
                                f" {ANNOTATIONS_MAX} bytes", "FieldValueTooLong"))
    finalizers = meta.get("finalizers")
    if finalizers is not None:
        if not isinstance(finalizers, list) or not all(isinstance(f, str) for f in finalizers):
            causes.append(cause("metadata.finalizers", "must be a list of strings",
                                "FieldValueTypeInvalid"))
        else:
            for i, f in enumerate(finalizers):
                for err in label_key_errors(f):
                    causes.append(cause(f"metadata.finalizers[{i}]",
                                        f'Invalid value: "{f}": {err}'))
    owners = meta.get("ownerReferences")
    if owners is not None:
        if not isinstance(owners, list):
            causes.append(cause("metadata.ownerReferences", "must be a list",
                                "FieldValueTypeInvalid"))
        else:
            for i, ref in enumerate(owners):
                for key in ("apiVersion", "kind", "name", "uid"):
                    if not isinstance(ref, dict) or not ref.get(key):
                        causes.append(cause(f"metadata.ownerReferences[{i}].{key}",
                                            "Required value", "FieldValueRequired"))
    return causes
