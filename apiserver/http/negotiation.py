"""Content negotiation, the one place that reads ``Accept`` and
``Content-Type``: which representation a client takes (an object or list as
JSON, YAML, a Table or partial metadata; discovery in its aggregated form;
OpenAPI v2 as JSON or protobuf) and what media type a request body is in."""

from __future__ import annotations

from collections.abc import Iterator

from starlette.requests import Request

from apiserver.contract import openapipb
from apiserver.contract.errors import NotAcceptable

META_GROUP = "meta.k8s.io"


def media_ranges(accept: str) -> Iterator[tuple[str, dict[str, str]]]:
    """Each media range of an ``Accept`` header, in order: its type (as
    written) and its parameters (those with a value)."""
    for clause in accept.split(","):
        media, *params = (part.strip() for part in clause.split(";"))
        yield media, dict(p.split("=", 1) for p in params if "=" in p)


def wants(request: Request, *, collection: bool = False) -> str:
    """The representation the client accepts: json, yaml, table or metadata."""
    accept = request.headers.get("accept", "") or "*/*"
    for media, opts in media_ranges(accept):
        if media not in ("application/json", "application/*", "*/*", "application/yaml",
                         "application/json+stream"):
            continue
        as_ = opts.get("as")
        if as_:
            if opts.get("g", META_GROUP) != META_GROUP or opts.get("v", "v1") not in (
                    "v1", "v1beta1"):
                continue
            if as_ == "Table":
                return "table"
            if as_ == "PartialObjectMetadataList" and collection:
                return "metadata"
            if as_ == "PartialObjectMetadata" and (not collection or "watch" in opts):
                return "metadata"
            continue
        return "yaml" if media == "application/yaml" else "json"
    raise NotAcceptable(f"only application/json, application/yaml, Table and"
                        f" PartialObjectMetadata are served, not {accept!r}")


def wants_aggregated(accept: str) -> bool:
    """Whether an Accept header asks for the aggregated discovery form (the
    client lists it among the forms it takes; the legacy one otherwise)."""
    return any(media == "application/json" and opts.get("g") == "apidiscovery.k8s.io"
               and opts.get("v") == "v2" and opts.get("as") == "APIGroupDiscoveryList"
               for media, opts in media_ranges(accept))


def accepts_json(accept: str) -> bool:
    """Whether plain JSON will do (no ``Accept``, or a range JSON falls in)."""
    if not accept.strip():
        return True
    return any(media.lower() in ("application/json", "application/*", "*/*")
               for media, _ in media_ranges(accept))


def openapi_v2_media(accept: str) -> str:
    """The media type ``/openapi/v2`` is answered in: kubectl asks for the
    protobuf form (its validation of kinds OpenAPI v3 does not have), JSON
    for everyone else."""
    if accepts_json(accept):
        return "application/json"
    if any(media in accept for media in openapipb.ACCEPTED):
        return openapipb.MEDIA_TYPE
    raise NotAcceptable(f"/openapi/v2 is served as application/json and"
                        f" {openapipb.MEDIA_TYPE}, not {accept!r}")


def body_media(request: Request) -> str:
    """The media type of a request body (JSON when not said)."""
    return request.headers.get("content-type", "application/json").split(";")[0].strip()
