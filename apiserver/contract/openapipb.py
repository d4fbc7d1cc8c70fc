"""The OpenAPI v2 document in the protobuf form kubectl asks for
(``application/com.github.proto-openapi.spec.v2@v1.0+protobuf``): gnostic's
``openapi.v2.Document``, with the document's definitions (what kubectl's
validation and ``explain`` read, each kind found by its
``x-kubernetes-group-version-kind``). The paths are served in the JSON form
only. Encoded by hand: a few messages of the protobuf wire format, field
numbers from gnostic's OpenAPIv2.proto. Pure."""

from __future__ import annotations

import struct
from functools import cache
from typing import Any

import orjson
import yaml

from apiserver.contract import openapi

#: what kubectl asks for, and (a media type Go's parser accepts) what is answered
ACCEPTED = ("application/com.github.proto-openapi.spec.v2@v1.0+protobuf",
            "application/com.github.proto-openapi.spec.v2.v1.0+protobuf")
MEDIA_TYPE = ACCEPTED[1]

# Schema's fields (openapi.v2.Schema)
_SCHEMA_STRINGS = {"$ref": 1, "format": 2, "title": 3, "description": 4, "pattern": 13}
_SCHEMA_DOUBLES = {"multipleOf": 6, "maximum": 7, "minimum": 9}
_SCHEMA_INTS = {"maxLength": 11, "minLength": 12, "maxItems": 14, "minItems": 15,
                "maxProperties": 17, "minProperties": 18}
_SCHEMA_BOOLS = {"exclusiveMaximum": 8, "exclusiveMinimum": 10, "uniqueItems": 16,
                 "readOnly": 27}


def _varint(n: int) -> bytes:
    out = bytearray()
    n &= (1 << 64) - 1
    while True:
        byte = n & 0x7F
        n >>= 7
        if n:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def _field(number: int, payload: bytes) -> bytes:
    """A length-delimited field (string, bytes, message)."""
    return _varint(number << 3 | 2) + _varint(len(payload)) + payload


def _string(number: int, text: str) -> bytes:
    return _field(number, text.encode()) if text else b""


def _any(value: Any) -> bytes:
    """openapi.v2.Any: the value as YAML (field 2)."""
    return _string(2, yaml.safe_dump(value, default_flow_style=False).rstrip("\n")
                   if isinstance(value, dict | list) else _scalar(value))


def _scalar(value: Any) -> str:
    return orjson.dumps(value).decode() if not isinstance(value, str) else value


def _named(number: int, name: str, value: bytes) -> bytes:
    """A Named* message (name = 1, value = 2) as field ``number``."""
    return _field(number, _string(1, name) + _field(2, value))


def schema(node: dict[str, Any]) -> bytes:
    """openapi.v2.Schema."""
    out = bytearray()
    for key, value in node.items():
        if key in _SCHEMA_STRINGS and isinstance(value, str):
            out += _string(_SCHEMA_STRINGS[key], value)
        elif key in _SCHEMA_DOUBLES:
            out += _varint(_SCHEMA_DOUBLES[key] << 3 | 1) + struct.pack("<d", float(value))
        elif key in _SCHEMA_INTS:
            out += _varint(_SCHEMA_INTS[key] << 3) + _varint(int(value))
        elif key in _SCHEMA_BOOLS:
            if value:
                out += _varint(_SCHEMA_BOOLS[key] << 3) + _varint(1)
        elif key == "default":
            out += _field(5, _any(value))
        elif key == "required":
            for name in value:
                out += _string(19, name)
        elif key == "enum":
            for item in value:
                out += _field(20, _any(item))
        elif key == "additionalProperties":
            item = _field(1, schema(value)) if isinstance(value, dict) else (
                _varint(2 << 3) + _varint(1 if value else 0))
            out += _field(21, item)
        elif key == "type":
            types = value if isinstance(value, list) else [value]
            out += _field(22, b"".join(_string(1, t) for t in types))
        elif key == "items" and isinstance(value, dict):
            out += _field(23, _field(1, schema(value)))
        elif key == "allOf":
            for sub in value:
                out += _field(24, schema(sub))
        elif key == "properties":
            out += _field(25, b"".join(_named(1, name, schema(sub))
                                       for name, sub in value.items()))
        elif key.startswith("x-"):
            out += _named(31, key, _any(value))
    return bytes(out)


@cache
def v2() -> bytes:
    """openapi.v2.Document: swagger, info and definitions."""
    doc = orjson.loads(openapi.v2())
    info = _string(1, doc["info"]["title"]) + _string(2, doc["info"]["version"])
    definitions = b"".join(_named(1, name, schema(node))
                           for name, node in doc["definitions"].items())
    return _string(1, doc["swagger"]) + _field(2, info) + _field(9, definitions)
