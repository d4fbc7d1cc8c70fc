"""The resource endpoint: a Kubernetes REST path (a collection or one
object) and its method, to the report service; request bodies read, bounded
and checked on the way in."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import yaml
from starlette.requests import Request
from starlette.responses import Response

from apiserver.contract import deleteoptions, openapi, patching, schema, validation
from apiserver.contract.errors import (
    BadRequest,
    MethodNotAllowed,
    NotFound,
    RequestEntityTooLarge,
    UnsupportedMediaType,
    cause,
    invalid,
)
from apiserver.contract.selectors import parse_field_selector, parse_label_selector
from apiserver.http.lists import items_of, list_response
from apiserver.http.negotiation import body_media, wants
from apiserver.http.objects import object_response
from apiserver.http.params import dry_run, limit, manager, query_flag
from apiserver.http.state import frontend
from apiserver.http.watches import watch_response
from apiserver.storage.service import ListQuery, ListResult
from pipeline.model.resources import ResourceType, by_path

JSON = dict[str, Any]


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


async def resource(request: Request) -> Response:
    """``/apis/{group}/{version}/...``: a collection or one object."""
    target = parse_target(dict(request.path_params))
    if target.name is None:
        return await collection(request, target)
    return await item(request, target)


async def collection(request: Request, target: Target) -> Response:
    service = frontend(request).service
    rtype = target.rtype
    method = request.method
    if method == "GET":
        kind = wants(request, collection=not query_flag(request, "watch"))
        query = _query(request, target)
        if query_flag(request, "watch"):
            return watch_response(request, service, query, kind)
        result = await service.list_objects(
            query, limit=limit(request),
            continue_token=request.query_params.get("continue", ""),
            resource_version=request.query_params.get("resourceVersion"),
            match=request.query_params.get("resourceVersionMatch"))
        return await list_response(rtype, kind, result)
    if method == "POST":
        if rtype.namespaced and target.namespace is None:
            raise MethodNotAllowed("create needs a namespace in the URL")
        kind = wants(request)
        warnings: list[str] = []
        obj = _checked(request, rtype, await _body(request),
                       namespace=target.namespace or "", name=None, warnings=warnings)
        created = await service.create(rtype, target.namespace or "", obj,
                                       dry_run=dry_run(request), manager=manager(request))
        return object_response(rtype, kind, created, 201, warnings)
    if method == "DELETE":
        kind = wants(request)
        options = await _delete_options(request)
        rv, deleted = await service.delete_collection(
            _query(request, target), dry_run=options.dry_run, finalizer=options.finalizer)
        return await list_response(rtype, kind, ListResult(rv, items_of(deleted)))
    raise MethodNotAllowed(f"{method} is not supported on a collection")


async def item(request: Request, target: Target) -> Response:
    service = frontend(request).service
    rtype, ns, name = target.rtype, target.namespace or "", target.name or ""
    if rtype.namespaced and target.namespace is None:
        raise NotFound("the server could not find the requested resource")
    kind = wants(request)
    method = request.method
    warnings: list[str] = []
    if method == "GET":
        obj = await service.get(
            rtype, ns, name, resource_version=request.query_params.get("resourceVersion"))
        return object_response(rtype, kind, obj)
    if method == "PUT":
        obj = _checked(request, rtype, await _body(request), namespace=ns, name=name,
                       warnings=warnings)
        if not obj["metadata"].get("resourceVersion"):
            raise invalid(rtype.kind, name, rtype.group, [cause(
                "metadata.resourceVersion",
                "Invalid value: 0x0: must be specified for an update")])
        updated = await service.update(rtype, ns, name, obj, dry_run=dry_run(request),
                                       manager=manager(request))
        return object_response(rtype, kind, updated, 200, warnings)
    if method == "PATCH":
        content_type = body_media(request)
        patch = patching.parse(content_type, await _raw_body(request))
        if content_type == patching.APPLY and isinstance(patch, dict):
            patch = _checked(request, rtype, patch, namespace=ns, name=name, warnings=warnings)
        patched, created = await service.patch(
            rtype, ns, name, content_type=content_type, patch=patch,
            manager=(request.query_params.get("fieldManager", "")
                     if content_type == patching.APPLY else manager(request)),
            force=query_flag(request, "force"), dry_run=dry_run(request))
        return object_response(rtype, kind, patched, 201 if created else 200, warnings)
    if method == "DELETE":
        options = await _delete_options(request)
        deleted = await service.delete(rtype, ns, name, options.preconditions,
                                       dry_run=options.dry_run, finalizer=options.finalizer)
        return object_response(rtype, kind, deleted)
    raise MethodNotAllowed(f"{method} is not supported on an object")


def _query(request: Request, target: Target) -> ListQuery:
    return ListQuery(target.rtype, target.namespace,
                     parse_label_selector(request.query_params.get("labelSelector")),
                     parse_field_selector(request.query_params.get("fieldSelector")))


# -- bodies -----------------------------------------------------------------
async def _raw_body(request: Request) -> bytes:
    length = request.headers.get("content-length")
    most = frontend(request).settings.max_body_bytes
    if length and length.isdigit() and int(length) > most:
        raise RequestEntityTooLarge(f"the request body is larger than {most} bytes")
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > most:
            raise RequestEntityTooLarge(f"the request body is larger than {most} bytes")
        chunks.append(chunk)
    return b"".join(chunks)


async def _body(request: Request) -> JSON:
    media = body_media(request)
    raw = await _raw_body(request)
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


async def _has_body(request: Request) -> bool:
    length = request.headers.get("content-length")
    return bool(length and length != "0") or "chunked" in request.headers.get(
        "transfer-encoding", "")


async def _delete_options(request: Request) -> deleteoptions.DeleteOptions:
    body = await _body(request) if await _has_body(request) else None
    return deleteoptions.parse(body, request.query_params,
                               request.query_params.getlist("dryRun"))


def _checked(request: Request, rtype: ResourceType, obj: JSON, *, namespace: str,
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
