"""HTTP routing: Kubernetes REST paths to the report service, content
negotiation, and one error handler that renders every failure as a Status."""

from __future__ import annotations

import hmac
import logging
from dataclasses import dataclass
from typing import Any

import orjson
import yaml
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

from apiserver import discovery, openapi, tables, validation
from apiserver.errors import (
    ApiError,
    BadRequest,
    MethodNotAllowed,
    NotAcceptable,
    NotFound,
    RequestEntityTooLarge,
    Unauthorized,
    UnsupportedMediaType,
    cause,
    invalid,
)
from apiserver.service import ReportService
from pipeline.resources import ResourceType, by_path
from pipeline.settings import Settings

log = logging.getLogger(__name__)
JSON = dict[str, Any]


def json_response(body: Any, status: int = 200, headers: dict[str, str] | None = None
                  ) -> Response:
    return Response(orjson.dumps(body), status_code=status, media_type="application/json",
                    headers=headers)


def error_response(err: ApiError) -> Response:
    headers = {"Retry-After": str(err.retry_after)} if err.retry_after is not None else None
    return json_response(err.status(), err.code, headers)


@dataclass(frozen=True)
class Target:
    """What a resource URL names."""

    rtype: ResourceType
    namespace: str | None  # None: all namespaces (or cluster-scoped)
    name: str | None


def parse_target(path_params: dict[str, str]) -> Target:
    group, version = path_params["group"], path_params["version"]
    parts = [p for p in path_params["rest"].split("/") if p]
    namespace = None
    if len(parts) >= 3 and parts[0] == "namespaces":
        namespace = parts[1]
        parts = parts[2:]
    if not parts or len(parts) > 2:
        raise NotFound("the server could not find the requested resource")
    rtype = by_path(group, version, parts[0])
    if rtype is None or (namespace is not None and not rtype.namespaced):
        raise NotFound("the server could not find the requested resource")
    if namespace is not None:
        validation.check_namespace(namespace)
    return Target(rtype, namespace, parts[1] if len(parts) == 2 else None)


def wants(request: Request) -> str:
    """The representation the client accepts: json, yaml, table or metadata."""
    accept = request.headers.get("accept", "") or "*/*"
    for clause in accept.split(","):
        media, *params = [p.strip() for p in clause.split(";")]
        opts = dict(p.split("=", 1) for p in params if "=" in p)
        if opts.get("as") == "Table" and opts.get("g", "meta.k8s.io") == "meta.k8s.io":
            return "table"
        if opts.get("as"):
            continue
        if media in ("application/json", "application/*", "*/*", "application/json+stream"):
            return "json"
        if media == "application/yaml":
            return "yaml"
    raise NotAcceptable(f"only application/json, application/yaml and Table are served, not"
                        f" {accept!r}")


def render(request: Request, body: Any, status: int = 200) -> Response:
    kind = wants(request)
    if kind == "yaml":
        return Response(yaml.safe_dump(body, sort_keys=False), status_code=status,
                        media_type="application/yaml")
    return json_response(body, status)


class Handlers:
    def __init__(self, service: ReportService, settings: Settings):
        self._service = service
        self._settings = settings

    async def _body(self, request: Request) -> JSON:
        media = request.headers.get("content-type", "application/json").split(";")[0].strip()
        length = request.headers.get("content-length")
        if length and length.isdigit() and int(length) > self._settings.max_body_bytes:
            raise RequestEntityTooLarge(
                f"the request body is larger than {self._settings.max_body_bytes} bytes")
        chunks, size = [], 0
        async for chunk in request.stream():
            size += len(chunk)
            if size > self._settings.max_body_bytes:
                raise RequestEntityTooLarge(
                    f"the request body is larger than {self._settings.max_body_bytes} bytes")
            chunks.append(chunk)
        raw = b"".join(chunks)
        if media in ("application/json", ""):
            return validation.parse_body(raw)
        if media == "application/yaml":
            try:
                value = yaml.safe_load(raw)
            except yaml.YAMLError as err:
                raise BadRequest(f"the request body is not valid YAML: {err}") from err
            if not isinstance(value, dict):
                raise BadRequest("the request body must be an object")
            return value
        raise UnsupportedMediaType(f"the body of the request was in an unknown format: {media}")

    async def collection(self, request: Request) -> Response:
        target = parse_target(dict(request.path_params))
        if target.name is not None:
            return await self.item(request, target)
        rtype = target.rtype
        if rtype.namespaced and target.namespace is None and request.method == "POST":
            raise MethodNotAllowed("create needs a namespace in the URL")
        if request.method == "GET":
            kind = wants(request)
            rv, items = await self._service.list(rtype, target.namespace)
            if kind == "table":
                return json_response(tables.table(rtype, items, resource_version=str(rv)))
            return render(request, {"apiVersion": rtype.api_version, "kind": rtype.list_kind,
                                    "metadata": {"resourceVersion": str(rv)}, "items": items})
        if request.method == "POST":
            wants(request)
            obj = validation.check_object(rtype, await self._body(request),
                                          namespace=target.namespace or "", name=None)
            created = await self._service.create(rtype, target.namespace or "", obj)
            return render(request, created, 201)
        raise MethodNotAllowed(f"{request.method} is not supported on a collection")

    async def item(self, request: Request, target: Target) -> Response:
        rtype, ns, name = target.rtype, target.namespace or "", target.name or ""
        if rtype.namespaced and target.namespace is None:
            raise NotFound("the server could not find the requested resource")
        kind = wants(request)
        if request.method == "GET":
            obj = await self._service.get(rtype, ns, name)
            if kind == "table":
                return json_response(tables.table(
                    rtype, [obj], resource_version=obj["metadata"]["resourceVersion"]))
            return render(request, obj)
        if request.method == "PUT":
            obj = validation.check_object(rtype, await self._body(request), namespace=ns,
                                          name=name)
            if not obj["metadata"].get("resourceVersion"):
                raise invalid(rtype.kind, name, rtype.group, [cause(
                    "metadata.resourceVersion",
                    "Invalid value: 0x0: must be specified for an update")])
            return render(request, await self._service.update(rtype, ns, name, obj))
        if request.method == "DELETE":
            pre: JSON = {}
            if await _has_body(request):
                options = await self._body(request)
                given = options.get("preconditions")
                if isinstance(given, dict):
                    pre = {k: v for k, v in given.items() if k in ("uid", "resourceVersion")}
            return render(request, await self._service.delete(rtype, ns, name, pre))
        raise MethodNotAllowed(f"{request.method} is not supported on an object")


async def _has_body(request: Request) -> bool:
    length = request.headers.get("content-length")
    return bool(length and length != "0") or "chunked" in request.headers.get(
        "transfer-encoding", "")


class BearerAuth:
    """ASGI middleware: every request but health checks must carry the token."""

    def __init__(self, app: ASGIApp, token: str):
        self._app = app
        self._expected = f"Bearer {token}".encode()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["path"] not in ("/healthz", "/livez", "/readyz"):
            given = dict(scope["headers"]).get(b"authorization", b"")
            if not hmac.compare_digest(given, self._expected):
                response = error_response(Unauthorized("Unauthorized"))
                await response(scope, receive, send)
                return
        await self._app(scope, receive, send)


def create_app(service: ReportService, settings: Settings, *, token: str | None = None
               ) -> ASGIApp:
    handlers = Handlers(service, settings)

    async def api(request: Request) -> Response:
        return json_response(discovery.api_versions())

    async def apis(request: Request) -> Response:
        return json_response(discovery.api_group_list())

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
        return Response(openapi.v2(), media_type="application/json")

    async def openapi_v3_index(request: Request) -> Response:
        return Response(openapi.v3_index(), media_type="application/json")

    async def openapi_v3(request: Request) -> Response:
        doc = openapi.v3(request.path_params["group"], request.path_params["version"])
        if doc is None:
            raise NotFound("the server could not find the requested resource")
        return Response(doc, media_type="application/json")

    async def healthz(request: Request) -> Response:
        return Response(b"ok", media_type="text/plain")

    async def on_api_error(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, ApiError)
        return error_response(exc)

    async def on_http_error(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, HTTPException)
        if exc.status_code == 404:
            return error_response(NotFound("the server could not find the requested resource"))
        if exc.status_code == 405:
            return error_response(MethodNotAllowed(f"{request.method} is not supported here"))
        return error_response(BadRequest(str(exc.detail)))

    async def on_unexpected(request: Request, exc: Exception) -> Response:
        log.exception("unexpected error serving %s %s", request.method, request.url.path)
        err = ApiError("an internal error occurred; see the server log")
        return error_response(err)

    methods = ["GET", "POST", "PUT", "PATCH", "DELETE"]
    routes = [
        Route("/api", api), Route("/apis", apis), Route("/apis/{group}", group),
        Route("/apis/{group}/{version}", group_version),
        Route("/apis/{group}/{version}/{rest:path}", handlers.collection, methods=methods),
        Route("/openapi/v2", openapi_v2), Route("/openapi/v3", openapi_v3_index),
        Route("/openapi/v3/apis/{group}/{version}", openapi_v3),
        Route("/version", version), Route("/healthz", healthz), Route("/livez", healthz),
        Route("/readyz", healthz),
    ]
    app = Starlette(routes=routes, exception_handlers={
        ApiError: on_api_error, HTTPException: on_http_error, Exception: on_unexpected})
    return BearerAuth(app, token) if token else app
