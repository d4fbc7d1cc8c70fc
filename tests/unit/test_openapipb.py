"""The protobuf form of /openapi/v2, read back with a small wire-format reader:
every definition of the JSON form is there, with its kind's
x-kubernetes-group-version-kind. (kubectl reads it in the e2e tests.)"""

from __future__ import annotations

import orjson
import yaml

from apiserver.contract import openapi, openapipb


def fields(data: bytes) -> list[tuple[int, int | bytes]]:
    out, i = [], 0
    while i < len(data):
        key, i = _varint(data, i)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, i = _varint(data, i)
            out.append((number, value))
        elif wire == 1:
            out.append((number, data[i:i + 8]))
            i += 8
        else:
            assert wire == 2, wire
            size, i = _varint(data, i)
            out.append((number, data[i:i + size]))
            i += size
    return out


def _varint(data: bytes, i: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        byte = data[i]
        i += 1
        value |= (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            return value, i


def named(data: bytes) -> tuple[str, bytes]:
    parts = dict(fields(data))
    return parts[1].decode(), parts[2]  # type: ignore[union-attr]


def test_every_definition_is_there_with_its_kind() -> None:
    doc = dict(fields(openapipb.v2()))
    assert doc[1] == b"2.0"
    definitions = dict(named(d) for _, d in fields(doc[9]))  # type: ignore[arg-type]
    expected = orjson.loads(openapi.v2())["definitions"]
    assert set(definitions) == set(expected)
    report = fields(definitions["io.wgpolicyk8s.v1alpha2.PolicyReport"])
    extensions = dict(named(v) for n, v in report if n == 31)  # type: ignore[arg-type]
    gvk = yaml.safe_load(dict(fields(extensions["x-kubernetes-group-version-kind"]))[2])
    assert gvk == [{"group": "wgpolicyk8s.io", "kind": "PolicyReport", "version": "v1alpha2"}]
    types = [dict(fields(v))[1] for n, v in report if n == 22]  # type: ignore[arg-type]
    assert types == [b"object"]
    properties = [named(p)[0] for n, v in report if n == 25 for _, p in fields(v)]  # type: ignore[arg-type]
    assert {"results", "summary", "scope", "metadata"} <= set(properties)
