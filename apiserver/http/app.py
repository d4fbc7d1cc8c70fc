"""The app: routes to the handlers, the state they serve from, one error
handler per kind of failure that renders it as a Status, and the access and
instrumentation wrapped around it all."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route
from starlette.types import ASGIApp

from apiserver.access.authn import Authentication, RequestHeaders, TokenReviewer
from apiserver.access.authz import AccessReviewer, Authorization
from apiserver.contract import failures
from apiserver.contract.errors import ApiError, BadRequest, MethodNotAllowed, NotFound
from apiserver.http import analytics, documents
from apiserver.http.instrumentation import Instrumented, metrics_page
from apiserver.http.resources import resource
from apiserver.http.state import Frontend
from apiserver.responses import error_response
from apiserver.storage.ports import AnalyticsQueries
from apiserver.storage.service import ReportService
from pipeline.model.storage import StorageError
from pipeline.settings import Settings

log = logging.getLogger(__name__)

Endpoint = Callable[[Request], Awaitable[Response]]

METHODS = ["GET", "POST", "PUT", "PATCH", "DELETE"]
ROUTES = [
    Route("/api", documents.api), Route("/apis", documents.apis),
    Route("/apis/{group}", documents.group),
    Route("/apis/{group}/{version}", documents.group_version),
    Route("/apis/{group}/{version}/{rest:path}", resource, methods=METHODS),
    Route("/openapi/v2", documents.openapi_v2), Route("/openapi/v3", documents.openapi_v3_index),
    Route("/openapi/v3/apis/{group}/{version}", documents.openapi_v3),
    Route("/version", documents.version), Route("/healthz", documents.healthz),
    Route("/livez", documents.healthz), Route("/readyz", documents.healthz),
    Route("/metrics", metrics_page),
]


@dataclass(frozen=True)
class Access:
    """Who may call and what they may do (``access.authn``, ``access.authz``)."""

    token: str | None = None  # the embedded kubeconfig's bearer token
    request_headers: RequestHeaders | None = None  # trusted with a front-proxy CA
    review_token: TokenReviewer | None = None
    review_access: AccessReviewer | None = None
    cache_seconds: float = 10.0


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


def create_app(service: ReportService, settings: Settings, *, token: str | None = None,
               store: AnalyticsQueries | None = None, access: Access | None = None) -> ASGIApp:
    routes = list(ROUTES)
    if store is not None:
        routes.append(Route(analytics.PATH, analytics.query, methods=["POST"]))
    app = Starlette(routes=routes, exception_handlers={
        ApiError: on_api_error, StorageError: on_storage_error, HTTPException: on_http_error,
        Exception: on_unexpected})
    app.state.frontend = Frontend(service, settings, store)
    app.state.analytics = store
    return _guarded(app, access or Access(token=token))


def create_analytics_app(store: AnalyticsQueries, *, token: str,
                         routes: Sequence[BaseRoute] = (),
                         metrics: Endpoint = metrics_page) -> ASGIApp:
    """The analytics endpoint alone, with health and ``metrics`` (and
    ``routes``), for a process that keeps a store but serves no reports: the
    fleet."""
    app = Starlette(routes=[
        Route(analytics.PATH, analytics.query, methods=["POST"]),
        Route("/healthz", documents.healthz), Route("/livez", documents.healthz),
        Route("/readyz", documents.healthz), Route("/metrics", metrics), *routes],
        exception_handlers={ApiError: on_api_error, StorageError: on_storage_error,
                            HTTPException: on_http_error, Exception: on_unexpected})
    app.state.analytics = store
    return _guarded(app, Access(token=token))


def _guarded(app: ASGIApp, access: Access) -> ASGIApp:
    return Instrumented(Authentication(
        Authorization(app, access.review_access, access.cache_seconds), access.token,
        access.request_headers, access.review_token))
