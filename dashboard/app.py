"""The dashboard's HTTP side (Starlette): one route per page, the filters from
the query string, the bearer token of the system it reads from, and each
answer's server time in a ``Server-Timing`` header."""

from __future__ import annotations

import hmac
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any
from urllib.parse import urlencode

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse, PlainTextResponse, RedirectResponse, Response
from starlette.routing import Route

from dashboard import pages, views
from dashboard.filters import FilterError, Filters, Resource

log = logging.getLogger(__name__)
COOKIE = "reports_dashboard"
FRAGMENT_HEADER = "x-dashboard-fragment"

Render = Callable[[Request, Filters], Awaitable[str]]


def create_app(source: views.Source, *, token: str | None) -> Starlette:
    """``token``: what a request must present (as a bearer token, the
    dashboard's cookie, or once as ``?token=`` which sets the cookie); None
    serves everyone (behind an authenticating proxy)."""

    def allowed(request: Request) -> bool:
        if token is None:
            return True
        given = request.headers.get("authorization", "").removeprefix("Bearer ").strip()
        given = given or request.cookies.get(COOKIE, "")
        return bool(given) and hmac.compare_digest(given, token)

    def page(name: str, render: Render) -> Callable[[Request], Awaitable[Response]]:
        async def handle(request: Request) -> Response:
            started = time.perf_counter()
            offered = request.query_params.get("token")
            if offered is not None and token is not None and hmac.compare_digest(offered, token):
                rest = urlencode([(k, v) for k, v in request.query_params.multi_items()
                                  if k != "token"])
                response = RedirectResponse(request.url.path + (f"?{rest}" if rest else ""),
                                            status_code=303)
                response.set_cookie(COOKIE, token, httponly=True, samesite="strict")
                return response
            if not allowed(request):
                return PlainTextResponse("Unauthorized: open the URL that `reports-pipeline"
                                         " dashboard` printed (it carries the token)", 401)
            status = 200
            try:
                f = Filters.parse(request.query_params)
            except FilterError as err:
                f, status = Filters(), 400
                content = pages.error_content(f"bad filter: {err}")
            else:
                try:
                    content = await render(request, f)
                except (ConnectionError, RuntimeError, OSError) as err:
                    status = 503
                    content = pages.error_content(f"the data source cannot answer: {err}")
            if request.headers.get(FRAGMENT_HEADER):
                body = content
            else:
                try:
                    choices = await views.choices(source)
                except (ConnectionError, RuntimeError, OSError):
                    choices = pages.Choices()
                body = pages.document(name, f, choices, content)
            elapsed = (time.perf_counter() - started) * 1000
            return HTMLResponse(body, status_code=status, headers={
                "Server-Timing": f"total;dur={elapsed:.1f}", "Cache-Control": "no-store"})
        return handle

    async def overview(request: Request, f: Filters) -> str:
        return await views.overview(source, f)

    async def trends(request: Request, f: Filters) -> str:
        return await views.trends(source, f)

    async def resources(request: Request, f: Filters) -> str:
        q = request.query_params
        target = (Resource(q.get("kind", ""), q.get("rns", ""), q["rname"])
                  if q.get("rname") else None)
        return await views.resources(source, f, target)

    async def findings(request: Request, f: Filters) -> str:
        return await views.findings(source, f)

    async def fleet(request: Request, f: Filters) -> str:
        return await views.fleet(source, f)

    async def healthz(request: Request) -> Response:
        return PlainTextResponse("ok")

    routes: list[Any] = [Route("/", page("overview", overview)),
                         Route("/trends", page("trends", trends)),
                         Route("/resources", page("resources", resources)),
                         Route("/findings", page("findings", findings)),
                         Route("/fleet", page("fleet", fleet)),
                         Route("/healthz", healthz)]
    return Starlette(routes=routes)
