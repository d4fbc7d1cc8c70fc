"""The served documents that are not objects: discovery (legacy and
aggregated), OpenAPI v2 and v3, the version, and health."""

from __future__ import annotations

import hashlib
from functools import cache

import orjson
from starlette.requests import Request
from starlette.responses import Response

from apiserver.contract import openapi, openapipb
from apiserver.contract.errors import NotFound
from apiserver.http import discovery
from apiserver.http.negotiation import openapi_v2_media, wants_aggregated
from apiserver.responses import json_response


def _etag_of(body: bytes) -> str:
    return f'"{hashlib.sha256(body).hexdigest()[:32]}"'


@cache
def _legacy() -> tuple[bytes, str]:
    body = orjson.dumps(discovery.aggregated_legacy_discovery())
    return body, _etag_of(body)


@cache
def _aggregated() -> tuple[bytes, str]:
    body = orjson.dumps(discovery.aggregated_discovery())
    return body, _etag_of(body)


def _aggregated_response(request: Request, body: bytes, etag: str) -> Response:
    # As the kube-apiserver: an ETag, and 304 when the client holds it
    headers = {"ETag": etag, "Vary": "Accept"}
    if request.headers.get("if-none-match") == etag:
        return Response(status_code=304, headers=headers)
    return Response(body, headers=headers, media_type=discovery.AGGREGATED_MEDIA_TYPE)


async def api(request: Request) -> Response:
    if wants_aggregated(request.headers.get("accept", "")):
        return _aggregated_response(request, *_legacy())
    return json_response(discovery.api_versions(), headers={"Vary": "Accept"})


async def apis(request: Request) -> Response:
    if not wants_aggregated(request.headers.get("accept", "")):
        return json_response(discovery.api_group_list(), headers={"Vary": "Accept"})
    return _aggregated_response(request, *_aggregated())


async def group(request: Request) -> Response:
    body = discovery.api_group(request.path_params["group"])
    if body is None:
        raise NotFound("the server could not find the requested resource")
    return json_response(body)


async def group_version(request: Request) -> Response:
    body = discovery.api_resource_list(request.path_params["group"],
                                       request.path_params["version"])
    if body is None:
        raise NotFound("the server could not find the requested resource")
    return json_response(body)


async def version(request: Request) -> Response:
    return json_response(discovery.SERVER_VERSION)


async def openapi_v2(request: Request) -> Response:
    media = openapi_v2_media(request.headers.get("accept", ""))
    if media == "application/json":
        return Response(openapi.v2(), media_type="application/json")
    return Response(openapipb.v2(), media_type=media)


async def openapi_v3_index(request: Request) -> Response:
    return Response(openapi.v3_index(), media_type="application/json")


async def openapi_v3(request: Request) -> Response:
    doc = openapi.v3(request.path_params["group"], request.path_params["version"])
    if doc is None:
        raise NotFound("the server could not find the requested resource")
    return Response(doc, media_type="application/json")


async def healthz(request: Request) -> Response:
    return Response(b"ok", media_type="text/plain")
