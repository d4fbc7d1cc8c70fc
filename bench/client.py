"""The benchmark's requests to a Kubernetes API, on ``kubeclient``: the
kubeconfig `up` writes (or any other), keep-alive connections, bodies sent
as bytes, lists timed to their last byte, watches read line by line. No
request is sent again: the benchmark counts what its clients meet."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Self

import orjson

import kubeclient
from kubeclient import JSON, APIError

TABLE = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json"


@dataclass(frozen=True)
class Listed:
    seconds: float
    size: int
    items: int | None = None
    #: the continue token of a page (empty: the last)
    continue_token: str = ""


class Client:
    def __init__(self, kubeconfig: Path, *, connections: int = 128):
        self._kubeconfig = kubeconfig
        self._connections = connections
        self._client: kubeclient.Client | None = None

    async def __aenter__(self) -> Self:
        target = await kubeclient.target(self._kubeconfig)
        self._client = kubeclient.Client(target, user_agent="reports-pipeline-bench",
                                         connections=self._connections, timeout=None,
                                         retries=0)
        return self

    async def __aexit__(self, *_: Any) -> None:
        if self._client is not None:
            await self._client.close()

    @property
    def api(self) -> kubeclient.Client:
        assert self._client is not None, "use the client as an async context manager"
        return self._client

    @property
    def server(self) -> str:
        return self.api.server

    async def request(self, method: str, path: str, body: JSON | bytes | None = None, *,
                      content_type: str = "application/json") -> JSON:
        return await self.api.json(method, path, body=body, content_type=content_type)

    async def create(self, collection: str, body: JSON | bytes) -> JSON:
        return await self.request("POST", collection, body)

    async def replace(self, path: str, body: JSON | bytes) -> JSON:
        return await self.request("PUT", path, body)

    async def delete(self, path: str) -> JSON:
        return await self.request("DELETE", path)

    async def get(self, path: str) -> JSON:
        return await self.request("GET", path)

    async def text(self, path: str) -> str:
        """A page that is not JSON (``/metrics``), or "" when it is refused."""
        try:
            return (await self.api.request("GET", path)).decode(errors="replace")
        except APIError:
            return ""

    async def list_timed(self, path: str, *, accept: str = "application/json") -> Listed:
        """GET a collection, timed to its last byte (parsing it is not timed)."""
        started = time.perf_counter()
        raw = await self.api.request("GET", path, headers={"Accept": accept})
        seconds = time.perf_counter() - started
        body = orjson.loads(raw)
        items = len(body.get("items") or body.get("rows") or [])
        return Listed(seconds, len(raw), items, body.get("metadata", {}).get("continue") or "")

    async def query(self, sql: str, parameters: JSON | None = None) -> list[list[Any]]:
        """Rows of a read-only SQL query through the analytics endpoint."""
        body = await self.request("POST", "/analytics/v1/query",
                                  {"query": sql, "parameters": parameters or {}})
        rows: list[list[Any]] = body["rows"]
        return rows

    async def watch(self, path: str) -> AsyncIterator[tuple[float, JSON]]:
        """Watch events as (arrival time, event), until the server ends the watch."""
        async with self.api.stream(path) as events:
            async for event in events:
                yield time.perf_counter(), event
