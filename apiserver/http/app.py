"""HTTP routing: Kubernetes REST paths to the report service, content
negotiation, and one error handler that renders every failure as a Status."""

from __future__ import annotations

import hashlib
import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import orjson
import yaml
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route
from starlette.types import ASGIApp

from apiserver.access.authn import Authentication, RequestHeaders, TokenReviewer
from apiserver.access.authz import AccessReviewer, Authorization
from apiserver.contract import (
    deleteoptions,
    failures,
    openapi,
    openapipb,
    patching,
    schema,
    tables,
    validation,
)
from apiserver.contract.errors import (
    ApiError,
    BadRequest,
    MethodNotAllowed,
    NotAcceptable,
    NotFound,
    RequestEntityTooLarge,
    UnsupportedMediaType,
    cause,
    invalid,
)
from apiserver.contract.selectors import parse_field_selector, parse_label_selector
from apiserver.http import analytics, discovery
from apiserver.http.instrumentation import Instrumented
from apiserver.http.responses import error_response, json_response, metrics_page
from apiserver.storage import watching
from apiserver.storage.ports import AnalyticsQueries
from apiserver.storage.service import Item, ListQuery, ListResult, ReportService, Written, as_json
from pipeline.model import managedfields
from pipeline.model.cache import Cached
from pipeline.model.resources import ResourceType, by_path
from pipeline.model.storage import StorageError
from pipeline.settings import Settings

log = logging.getLogger(__name__)
JSON = dict[str, Any]
META_GROUP = "meta.k8s.io"


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


def wants(request: Request, *, collection: bool = False) -> str:
    """The representation the client accepts: json, yaml, table or metadata."""
    accept = request.headers.get("accept", "") or "*/*"
    for clause in accept.split(","):
        media, *params = [p.strip() for p in clause.split(";")]
        opts = dict(p.split("=", 1) for p in params if "=" in p)
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


def _accepts_json(accept: str) -> bool:
    if not accept.strip():
        return True
    for part in accept.split(","):
        media = part.split(";")[0].strip().lower()
        if media in ("application/json", "application/*", "*/*"):
            return True
    return False


def _query_flag(request: Request, name: str) -> bool:
    return request.query_params.get(name, "").lower() in ("true", "1")


def _dry_run(request: Request) -> bool:
    values = request.query_params.getlist("dryRun")
    for value in values:
        if value != "All":
            raise BadRequest(f'unsupported dryRun value "{value}": only "All" is supported')
    return bool(values)


def _limit(request: Request) -> int:
    text = request.query_params.get("limit", "0") or "0"
    try:
        value = int(text)
    except ValueError:
        raise BadRequest(f'invalid limit "{text}"') from None
    return max(value, 0)


class Handlers:
    def __init__(self, service: ReportService, settings: Settings):
        self._service = service
        self._settings = settings

    # -- bodies -----------------------------------------------------------
    async def _raw_body(self, request: Request) -> bytes:
        length = request.headers.get("content-length")
        limit = self._settings.max_body_bytes
        if length and length.isdigit() and int(length) > limit:
            raise RequestEntityTooLarge(f"the request body is larger than {limit} bytes")
        chunks, size = [], 0
        async for chunk in request.stream():
            size += len(chunk)
            if size > limit:
                raise RequestEntityTooLarge(f"the request body is larger than {limit} bytes")
            chunks.append(chunk)
        return b"".join(chunks)

    async def _body(self, request: Request) -> JSON:
        media = _media(request)
        raw = await self._raw_body(request)
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

    async def _delete_options(self, request: Request) -> deleteoptions.DeleteOptions:
        body = await self._body(request) if await _has_body(request) else None
        return deleteoptions.parse(body, request.query_params,
                                   request.query_params.getlist("dryRun"))

    def _checked(self, request: Request, rtype: ResourceType, obj: JSON, *, namespace: str,
                 name: str | None, warnings: list[str]) -> JSON:
        known = schema.surely_known(rtype, obj)
        obj = validation.check_object(rtype, obj, namespace=namespace, name=name, known=known)
        mode = request.query_params.get("fieldValidation", "Warn") or "Warn"
        if mode not in ("Ignore", "Warn", "Strict"):
            raise BadRequest(f'fieldValidation "{mode}" is invalid: use Ignore, Warn or Strict')
        unknown = [] if known else openapi.unknown_fields(rtype, obj)
        if unknown:
            if mode == "Strict":
                raise BadRequest("strict decoding error: " + ", ".join(
                    f'unknown field "{f}"' for f in unknown))
            if mode == "Warn":
                warnings += [f'unknown field "{f}"' for f in unknown]
            obj = openapi.prune(rtype, obj)
        return obj

    # -- routing ----------------------------------------------------------
    async def resource(self, request: Request) -> Response:
        target = parse_target(dict(request.path_params))
        if target.name is None:
            return await self.collection(request, target)
        return await self.item(request, target)

    def _query(self, request: Request, target: Target) -> ListQuery:
        return ListQuery(target.rtype, target.namespace,
                         parse_label_selector(request.query_params.get("labelSelector")),
                         parse_field_selector(request.query_params.get("fieldSelector")))

    async def collection(self, request: Request, target: Target) -> Response:
        rtype = target.rtype
        method = request.method
        if method == "GET":
            kind = wants(request, collection=not _query_flag(request, "watch"))
            query = self._query(request, target)
            if _query_flag(request, "watch"):
                return self._watch(request, query, kind)
            result = await self._service.list_objects(
                query, limit=_limit(request),
                continue_token=request.query_params.get("continue", ""),
                resource_version=request.query_params.get("resourceVersion"),
                match=request.query_params.get("resourceVersionMatch"))
            return await _list_response(rtype, kind, result)
        if method == "POST":
            if rtype.namespaced and target.namespace is None:
                raise MethodNotAllowed("create needs a namespace in the URL")
            kind = wants(request)
            warnings: list[str] = []
            obj = self._checked(request, rtype, await self._body(request),
                                namespace=target.namespace or "", name=None, warnings=warnings)
            created = await self._service.create(rtype, target.namespace or "", obj,
                                                 dry_run=_dry_run(request),
                                                 manager=_manager(request))
            return _object_response(rtype, kind, created, 201, warnings)
        if method == "DELETE":
            kind = wants(request)
            options = await self._delete_options(request)
            rv, deleted = await self._service.delete_collection(
                self._query(request, target), dry_run=options.dry_run,
                finalizer=options.finalizer)
            return await _list_response(rtype, kind, ListResult(rv, _items(deleted)))
        raise MethodNotAllowed(f"{method} is not supported on a collection")

    async def item(self, request: Request, target: Target) -> Response:
        rtype, ns, name = target.rtype, target.namespace or "", target.name or ""
        if rtype.namespaced and target.namespace is None:
            raise NotFound("the server could not find the requested resource")
        kind = wants(request)
        method = request.method
        warnings: list[str] = []
        if method == "GET":
            obj = await self._service.get(
                rtype, ns, name, resource_version=request.query_params.get("resourceVersion"))
            return _object_response(rtype, kind, obj)
        if method == "PUT":
            obj = self._checked(request, rtype, await self._body(request), namespace=ns,
                                name=name, warnings=warnings)
            if not obj["metadata"].get("resourceVersion"):
                raise invalid(rtype.kind, name, rtype.group, [cause(
                    "metadata.resourceVersion",
                    "Invalid value: 0x0: must be specified for an update")])
            updated = await self._service.update(rtype, ns, name, obj,
                                                 dry_run=_dry_run(request),
                                                 manager=_manager(request))
            return _object_response(rtype, kind, updated, 200, warnings)
        if method == "PATCH":
            content_type = _media(request)
            patch = patching.parse(content_type, await self._raw_body(request))
            if content_type == patching.APPLY and isinstance(patch, dict):
                patch = self._checked(request, rtype, patch, namespace=ns, name=name,
                                      warnings=warnings)
            patched, created = await self._service.patch(
                rtype, ns, name, content_type=content_type, patch=patch,
                manager=(request.query_params.get("fieldManager", "")
                         if content_type == patching.APPLY else _manager(request)),
                force=_query_flag(request, "force"), dry_run=_dry_run(request))
            return _object_response(rtype, kind, patched, 201 if created else 200, warnings)
        if method == "DELETE":
            options = await self._delete_options(request)
            deleted = await self._service.delete(rtype, ns, name, options.preconditions,
                                                 dry_run=options.dry_run,
                                                 finalizer=options.finalizer)
            return _object_response(rtype, kind, deleted)
        raise MethodNotAllowed(f"{method} is not supported on an object")

    def _watch(self, request: Request, query: ListQuery, kind: str) -> Response:
        params = request.query_params
        timeout = params.get("timeoutSeconds")
        try:
            seconds = float(timeout) if timeout else 1800.0
        except ValueError:
            raise BadRequest(f'invalid timeoutSeconds "{timeout}"') from None
        initial = params.get("sendInitialEvents")
        options = watching.WatchOptions(
            resource_version=params.get("resourceVersion"),
            send_initial_events=None if initial is None else initial.lower() == "true",
            bookmarks=_query_flag(request, "allowWatchBookmarks"), timeout=seconds)
        render = _event_renderer(query.rtype, kind)
        return StreamingResponse(watching.stream(self._service, query, options, render),
                                 media_type="application/json")


def _manager(request: Request) -> str:
    """The field manager of an ordinary write: ``fieldManager``, or as
    kube-apiserver derives it, the user agent up to its first ``/``."""
    return request.query_params.get("fieldManager") or managedfields.manager_from_user_agent(
        request.headers.get("user-agent", ""))


def _media(request: Request) -> str:
    return request.headers.get("content-type", "application/json").split(";")[0].strip()


async def _items(objects: list[JSON]) -> AsyncIterator[Item]:
    for obj in objects:
        meta = obj.get("metadata") or {}
        yield Item(meta.get("namespace", ""), meta.get("name", ""), 0, obj=obj)


def _represent(rtype: ResourceType, kind: str, obj: JSON) -> JSON:
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


def _object_response(rtype: ResourceType, kind: str, obj: Written, status: int = 200,
                     warnings: list[str] | None = None) -> Response:
    if isinstance(obj, Cached) and kind == "json":
        # the object's JSON as the change log holds it
        response = Response(obj.raw, status_code=status, media_type="application/json")
    elif kind == "yaml":
        response = Response(yaml.safe_dump(_represent(rtype, kind, as_json(obj)),
                                           sort_keys=False),
                            status_code=status, media_type="application/yaml")
    else:
        response = json_response(_represent(rtype, kind, as_json(obj)), status)
    for text in warnings or ():
        response.headers.append("Warning", warning_header(text))  # one header each
    return response


async def _list_response(rtype: ResourceType, kind: str, result: ListResult) -> Response:
    if kind == "yaml":
        items = [item.object() async for item in result.items]
        body = {"apiVersion": rtype.api_version, "kind": rtype.list_kind,
                "metadata": _list_meta(result), "items": items}
        return Response(yaml.safe_dump(body, sort_keys=False), media_type="application/yaml")
    return StreamingResponse(_list_chunks(rtype, kind, result), media_type="application/json")


def _list_meta(result: ListResult) -> JSON:
    meta: JSON = {"resourceVersion": str(result.resource_version)}
    if result.continue_token:
        meta["continue"] = result.continue_token
    return meta


async def _list_chunks(rtype: ResourceType, kind: str, result: ListResult
                       ) -> AsyncIterator[bytes]:
    """A list as JSON, written as its items arrive: memory stays flat however
    long the list. ``metadata`` comes last, once the continue token is known."""
    if kind == "table":
        yield (b'{"kind":"Table","apiVersion":"meta.k8s.io/v1","columnDefinitions":'
               + orjson.dumps(tables.COLUMNS) + b',"rows":[')
    elif kind == "metadata":
        yield b'{"kind":"PartialObjectMetadataList","apiVersion":"meta.k8s.io/v1","items":['
    else:
        yield orjson.dumps({"apiVersion": rtype.api_version, "kind": rtype.list_kind})[:-1] \
            + b',"items":['
    first = True
    batch: list[bytes] = []
    now = tables.now()
    async for item in result.items:
        if kind == "table":
            chunk = orjson.dumps(tables.row(rtype, item.object(), now))
        elif kind == "metadata":
            chunk = orjson.dumps(tables.partial_metadata(item.object()))
        else:
            chunk = item.json()
        batch.append(chunk if first else b"," + chunk)
        first = False
        if len(batch) >= 100:
            yield b"".join(batch)
            batch = []
    batch.append(b'],"metadata":' + orjson.dumps(_list_meta(result)) + b"}")
    yield b"".join(batch)


def _event_renderer(rtype: ResourceType, kind: str) -> watching.Render:
    first = [True]

    def render(etype: str, obj: JSON | Cached) -> bytes:
        if isinstance(obj, Cached):
            if kind not in ("table", "metadata"):  # the object as it is, not re-encoded
                return b'{"type":"%s","object":%s}\n' % (etype.encode(), obj.raw)
            obj = obj.head if kind == "metadata" else obj.obj
        if etype in ("ERROR", "BOOKMARK"):
            body = obj if etype == "ERROR" or kind != "metadata" else tables.partial_metadata(obj)
        else:
            body = _represent(rtype, kind, obj)
            if kind == "table":
                if not first[0]:
                    body["columnDefinitions"] = []
                first[0] = False
        return orjson.dumps({"type": etype, "object": body}) + b"\n"
    return render


async def _has_body(request: Request) -> bool:
    length = request.headers.get("content-length")
    return bool(length and length != "0") or "chunked" in request.headers.get(
        "transfer-encoding", "")


@dataclass(frozen=True)
class Access:
    """Who may call and what they may do (``access.authn``, ``access.authz``)."""

    token: str | None = None  # the embedded kubeconfig's bearer token
    request_headers: RequestHeaders | None = None  # trusted with a front-proxy CA
    review_token: TokenReviewer | None = None
    review_access: AccessReviewer | None = None
    cache_seconds: float = 10.0


def create_app(service: ReportService, settings: Settings, *, token: str | None = None,
               store: AnalyticsQueries | None = None, access: Access | None = None) -> ASGIApp:
    handlers = Handlers(service, settings)

    def aggregated_response(request: Request, body: bytes, etag: str) -> Response:
        # As the kube-apiserver: an ETag, and 304 when the client holds it
        headers = {"ETag": etag, "Vary": "Accept"}
        if request.headers.get("if-none-match") == etag:
            return Response(status_code=304, headers=headers)
        return Response(body, headers=headers, media_type=discovery.AGGREGATED_MEDIA_TYPE)

    def etag_of(body: bytes) -> str:
        return f'"{hashlib.sha256(body).hexdigest()[:32]}"'

    legacy = orjson.dumps(discovery.aggregated_legacy_discovery())
    legacy_etag = etag_of(legacy)

    async def api(request: Request) -> Response:
        if discovery.wants_aggregated(request.headers.get("accept", "")):
            return aggregated_response(request, legacy, legacy_etag)
        return json_response(discovery.api_versions(), headers={"Vary": "Accept"})

    aggregated = orjson.dumps(discovery.aggregated_discovery())
    aggregated_etag = etag_of(aggregated)

    async def apis(request: Request) -> Response:
        if not discovery.wants_aggregated(request.headers.get("accept", "")):
            return json_response(discovery.api_group_list(), headers={"Vary": "Accept"})
        return aggregated_response(request, aggregated, aggregated_etag)

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
        # kubectl asks for the protobuf form (its validation of kinds that
        # OpenAPI v3 does not have); JSON for everyone else
        accept = request.headers.get("accept", "")
        if _accepts_json(accept):
            return Response(openapi.v2(), media_type="application/json")
        if any(media in accept for media in openapipb.ACCEPTED):
            return Response(openapipb.v2(), media_type=openapipb.MEDIA_TYPE)
        raise NotAcceptable(f"/openapi/v2 is served as application/json and"
                            f" {openapipb.MEDIA_TYPE}, not {accept!r}")

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

    async def on_storage_error(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, StorageError)
        return error_response(failures.api_error(exc))

    async def on_http_error(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, HTTPException)
        if exc.status_code == 404:
            return error_response(NotFound("the server could not find the requested resource"))
        if exc.status_code == 405:
            return error_response(MethodNotAllowed(f"{request.method} is not supported here"))
        return error_response(BadRequest(str(exc.detail)))

    async def on_unexpected(request: Request, exc: Exception) -> Response:
        log.exception("unexpected error serving %s %s", request.method, request.url.path)
        return error_response(ApiError("an internal error occurred; see the server log"))

    methods = ["GET", "POST", "PUT", "PATCH", "DELETE"]
    routes = [
        Route("/api", api), Route("/apis", apis), Route("/apis/{group}", group),
        Route("/apis/{group}/{version}", group_version),
        Route("/apis/{group}/{version}/{rest:path}", handlers.resource, methods=methods),
        Route("/openapi/v2", openapi_v2), Route("/openapi/v3", openapi_v3_index),
        Route("/openapi/v3/apis/{group}/{version}", openapi_v3),
        Route("/version", version), Route("/healthz", healthz), Route("/livez", healthz),
        Route("/readyz", healthz), Route("/metrics", metrics_page),
    ]
    if store is not None:
        routes.append(Route(analytics.PATH, analytics.endpoint(store), methods=["POST"]))
    app = Starlette(routes=routes, exception_handlers={
        ApiError: on_api_error, StorageError: on_storage_error, HTTPException: on_http_error,
        Exception: on_unexpected})
    access = access or Access(token=token)
    return Instrumented(Authentication(
        Authorization(app, access.review_access, access.cache_seconds), access.token,
        access.request_headers, access.review_token))
