"""ASGI middleware counting and timing the frontend's requests as the
kube-apiserver does (``apiserver_request_total``,
``apiserver_request_duration_seconds``), by the verb a Kubernetes client
means (get, list, watch, create, update, patch, delete, deletecollection),
API group and resource; and the watches being served. Serves the metrics page."""

from __future__ import annotations

import time

from starlette.requests import Request
from starlette.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from apiserver.access.requestinfo import request_info
from pipeline.observe import metrics


class Instrumented:
    def __init__(self, app: ASGIApp):
        self._app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self._app(scope, receive, send)
            return
        info = request_info(scope)
        # non-resource requests are counted by their HTTP method, as before
        verb = info.verb if info.resource else scope["method"].lower()
        group, resource = info.group, info.resource
        started = time.perf_counter()
        code = 500
        watching = verb == "watch"
        if watching:
            metrics.OPEN_WATCHES.labels(resource).inc()

        async def sending(message: Message) -> None:
            nonlocal code
            if message["type"] == "http.response.start":
                code = message["status"]
            await send(message)

        try:
            await self._app(scope, receive, sending)
        finally:
            metrics.labelled(metrics.REQUESTS, verb.upper() if watching else verb, group,
                             resource, str(code)).inc()
            if watching:
                metrics.OPEN_WATCHES.labels(resource).dec()
            else:
                metrics.labelled(metrics.REQUEST_SECONDS, verb, group, resource).observe(
                    time.perf_counter() - started)


async def metrics_page(request: Request) -> Response:
    """The process's Prometheus metrics."""
    body, content_type = metrics.exposition()
    return Response(body, headers={"Content-Type": content_type})
