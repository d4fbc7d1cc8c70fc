"""One object as a response, in the representation the client asked for
(JSON, YAML, a Table or partial metadata), with the write's warnings."""

from __future__ import annotations

from typing import Any

import yaml
from starlette.responses import Response

from apiserver.contract import tables
from apiserver.responses import json_response
from apiserver.storage.service import Written, as_json
from pipeline.model.cache import Cached
from pipeline.model.resources import ResourceType

JSON = dict[str, Any]


def represent(rtype: ResourceType, kind: str, obj: JSON) -> JSON:
    """One object in the representation the client asked for."""
    if kind == "table":
        return tables.table(rtype, [obj], resource_version=str(
            obj["metadata"].get("resourceVersion", "")))
    if kind == "metadata":
        return tables.partial_metadata(obj)
    return obj


def warning_header(text: str) -> str:
    """A ``Warning`` header value as the kube-apiserver writes it: code 299,
    no agent, the text as an RFC 9110 quoted-string."""
    quoted = text.replace("\\", "\\\\").replace('"', '\\"')
    return f'299 - "{quoted}"'


def object_response(rtype: ResourceType, kind: str, obj: Written, status: int = 200,
                    warnings: list[str] | None = None) -> Response:
    if isinstance(obj, Cached) and kind == "json":
        # the object's JSON as the change log holds it
        response = Response(obj.raw, status_code=status, media_type="application/json")
    elif kind == "yaml":
        response = Response(yaml.safe_dump(represent(rtype, kind, as_json(obj)),
                                           sort_keys=False),
                            status_code=status, media_type="application/yaml")
    else:
        response = json_response(represent(rtype, kind, as_json(obj)), status)
    for text in warnings or ():
        response.headers.append("Warning", warning_header(text))  # one header each
    return response
