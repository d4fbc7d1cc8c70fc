"""Report bodies checked against their resource's structural schema, the one
``/openapi/v2`` and ``/openapi/v3`` serve (``apiserver.contract.openapi``), and refused
in the kube-apiserver's words for custom resources: one cause per bad field.

jsonschema-rs compiles each resource's schema once (Rust, a few microseconds a
report); integer ``format``s (int32, int64) bound their values as Go's types
do. ``metadata`` is checked by ``apiserver.contract.validation`` with Kubernetes' own
rules. Pure."""

from __future__ import annotations

import re
from functools import cache
from typing import Any

import jsonschema_rs
import orjson

from apiserver.contract import openapi
from apiserver.contract.errors import cause
from pipeline.model.resources import ResourceType, by_id

JSON = dict[str, Any]

INTEGER_BOUNDS = {"int32": (-(2**31), 2**31 - 1), "int64": (-(2**63), 2**63 - 1)}
#: fields every object has, checked elsewhere
ENVELOPE = ("apiVersion", "kind", "metadata")


def _bounded(node: Any) -> Any:
    """The schema with ``minimum``/``maximum`` from each integer's format."""
    if isinstance(node, dict):
        out = {k: _bounded(v) for k, v in node.items()}
        if out.get("type") == "integer" and out.get("format") in INTEGER_BOUNDS:
            low, high = INTEGER_BOUNDS[out["format"]]
            out.setdefault("minimum", low)
            out.setdefault("maximum", high)
        return out
    if isinstance(node, list):
        return [_bounded(v) for v in node]
    return node


@cache
def _validator(rtype_id: str) -> Any:
    schema = dict(openapi.resolved(by_id(rtype_id)))
    schema["properties"] = {k: v for k, v in schema["properties"].items() if k not in ENVELOPE}
    return jsonschema_rs.validator_for(_bounded(schema))


def _closed(node: Any) -> Any:
    """The schema with every object that lists its properties closed to others
    (what ``openapi.unknown_fields`` looks for)."""
    if isinstance(node, dict):
        out = {k: _closed(v) for k, v in node.items()}
        if (node.get("type") == "object" and isinstance(node.get("properties"), dict)
                and "additionalProperties" not in node
                and not node.get("x-kubernetes-preserve-unknown-fields")):
            out["additionalProperties"] = False
        return out
    if isinstance(node, list):
        return [_closed(v) for v in node]
    return node


@cache
def _closed_validator(rtype_id: str) -> Any:
    return jsonschema_rs.validator_for(_closed(_bounded(openapi.resolved(by_id(rtype_id)))))


def surely_known(rtype: ResourceType, obj: JSON) -> bool:
    """True when every field of ``obj`` is declared by the schema and valid, at
    the cost of one compiled validation (its body then has no ``causes``);
    False means "walk it" (``openapi.unknown_fields``), as for any body with a
    type error."""
    return bool(_closed_validator(rtype.id).is_valid(obj))


def json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    return "object"


def _path(parts: list[str | int]) -> str:
    out = ""
    for part in parts:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else part)
    return out


def _quoted(value: Any) -> str:
    return orjson.dumps(value).decode() if isinstance(value, str) else str(value)


def causes(rtype: ResourceType, obj: JSON) -> list[JSON]:
    """One cause per field of ``obj`` (its body, not its metadata) that breaks
    the schema, worded as the kube-apiserver words them for a custom resource;
    none for a valid body."""
    body = {k: v for k, v in obj.items() if k not in ENVELOPE}
    validator = _validator(rtype.id)
    if validator.is_valid(body):
        return []
    found: list[JSON] = []
    seen: set[tuple[str, str]] = set()
    for error in validator.iter_errors(body):
        kind, path, value = error.kind, _path(list(error.instance_path)), error.instance
        if kind.name == "type":
            if value is None:
                continue  # null is an absent optional field, as for custom resources
            wanted = kind.types[0] if kind.types else "object"
            got = json_type(value)
            item = cause(path, f'Invalid value: "{got}": {path} in body must be of type'
                               f' {wanted}: "{got}"', "FieldValueTypeInvalid")
        elif kind.name == "enum":
            options = ", ".join(_quoted(o) for o in kind.options)
            item = cause(path, f"Unsupported value: {_quoted(value)}: supported values:"
                               f" {options}", "FieldValueNotSupported")
        elif kind.name == "required":
            path = f"{path}.{kind.property}" if path else kind.property
            item = cause(path, "Required value", "FieldValueRequired")
        elif kind.name == "maximum":
            item = cause(path, f"Invalid value: {value}: {path} in body should be less than or"
                               f" equal to {kind.limit}")
        elif kind.name == "minimum":
            item = cause(path, f"Invalid value: {value}: {path} in body should be greater than"
                               f" or equal to {kind.limit}")
        else:
            item = cause(path, f"Invalid value: {_quoted(value)}: {error.message}")
        key = (item["field"], item["reason"])
        if key not in seen:
            seen.add(key)
            found.append(item)
    return sorted(found, key=lambda c: _natural(c["field"]))


def _natural(path: str) -> list[Any]:
    """``results[2]`` before ``results[10]``."""
    return [int(p) if p.isdigit() else p for p in re.split(r"(\d+)", path)]
