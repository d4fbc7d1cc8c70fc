"""ASGI middleware counting and timing the frontend's requests as the
kube-apiserver does (``apiserver_request_total``,
``apiserver_request_duration_seconds``), by the verb a Kubernetes client
means (get, list, watch, create, update, patch, delete, deletecollection),
API group and resource; and the watches being served."""

from __future__ import annotations

import time
from urllib.parse import parse_qs

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from pipeline import metrics

_VERBS = {("GET", False): "get", ("GET", True): "list", ("POST", True): "create",
          ("PUT", False): "update", ("PATCH", False): "patch", ("DELETE", False): "delete",
          ("DELETE", True): "deletecollection"}


def describe(method: str, path: str, query: bytes) -> tuple[str, str, str]:
    """(verb, group, resource) of a request; resource is "" for paths that
    name none (discovery, OpenAPI, health)."""
    parts = [p for p in path.split("/") if p]
    if len(parts) < 4 or parts[0] != "apis":
        return method.lower(), "", ""
    group, rest = parts[1], parts[3:]
    if rest[0] == "namespaces" and len(rest) >= 3:
        rest = rest[2:]
    resource, collection = rest[0], len(rest) == 1
    if method == "GET" and collection and parse_qs(query.decode("latin-1")).get(
            "watch", [""])[0] in ("true", "1"):
        return "watch", group, resource
    return _VERBS.get((method, collection), method.lower()), group, resource


class Instrumented:
    def __init__(self, app: ASGIApp):
        self._app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self._app(scope, receive, send)
            return
        verb, group, resource = describe(scope["method"], scope["path"],
                                         scope.get("query_string", b""))
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
            metrics.REQUESTS.labels(verb.upper() if watching else verb, group, resource,
                                    str(code)).inc()
            if watching:
                metrics.OPEN_WATCHES.labels(resource).dec()
            else:
                metrics.REQUEST_SECONDS.labels(verb, group, resource).observe(
                    time.perf_counter() - started)
