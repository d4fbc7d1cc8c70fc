"""A Kubernetes REST client for the benchmark, on aiohttp: keep-alive
connections, bodies sent as bytes, lists read to the last byte, watches read
line by line. Found through the kubeconfig ``reports-pipeline up`` writes."""

from __future__ import annotations

import base64
import ssl
import tempfile
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import yaml

JSON = dict[str, Any]
TABLE = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json"


class RequestFailed(RuntimeError):
    def __init__(self, method: str, path: str, status: int, body: bytes):
        super().__init__(f"{method} {path}: {status} {body[:300]!r}")
        self.status = status


@dataclass(frozen=True)
class Listed:
    seconds: float
    size: int
    items: int | None = None
    #: the continue token of a page (empty: the last)
    continue_token: str = ""


def _credentials(path: Path) -> tuple[str, ssl.SSLContext, dict[str, str]]:
    """The server, TLS context and headers of a kubeconfig's current context:
    a bearer token or a client certificate (in files or inline), the server's
    CA (in a file, inline, or the system's)."""
    config = yaml.safe_load(path.read_text())
    contexts = {c["name"]: c["context"] for c in config.get("contexts") or []}
    context: dict[str, Any] = (contexts.get(config.get("current-context", ""))
                               or next(iter(contexts.values()), {}))

    def named(kind: str, name: str | None) -> dict[str, Any]:
        entries = {e["name"]: e[kind[:-1]] for e in config.get(kind) or []}
        found: dict[str, Any] = entries.get(name or "") or next(iter(entries.values()), {})
        return found
    cluster, user = named("clusters", context.get("cluster")), named("users", context.get("user"))
    base = path.parent

    def pem(key: str) -> str | None:
        if f"{key}-data" in (cluster | user):
            return base64.b64decode((cluster | user)[f"{key}-data"]).decode()
        if key in (cluster | user):
            return (base / (cluster | user)[key]).read_text()
        return None

    ca = pem("certificate-authority")
    context_ssl = ssl.create_default_context(cadata=ca) if ca else ssl.create_default_context()
    if cluster.get("insecure-skip-tls-verify"):
        context_ssl.check_hostname = False
        context_ssl.verify_mode = ssl.CERT_NONE
    cert, key = pem("client-certificate"), pem("client-key")
    if cert and key:
        with tempfile.TemporaryDirectory() as tmp:
            (Path(tmp) / "c").write_text(cert)
            (Path(tmp) / "k").write_text(key)
            context_ssl.load_cert_chain(Path(tmp) / "c", Path(tmp) / "k")
    headers = {"Authorization": f"Bearer {user['token']}"} if user.get("token") else {}
    return str(cluster["server"]).rstrip("/"), context_ssl, headers


class Client:
    def __init__(self, kubeconfig: Path, *, connections: int = 128):
        self.server, self._ssl, self._headers = _credentials(kubeconfig)
        self._connections = connections
        self._session: aiohttp.ClientSession | None = None

    async def __aenter__(self) -> Client:
        self._session = aiohttp.ClientSession(
            self.server, headers=self._headers,
            connector=aiohttp.TCPConnector(ssl=self._ssl, limit=self._connections),
            timeout=aiohttp.ClientTimeout(total=None, sock_connect=10))
        return self

    async def __aexit__(self, *_: Any) -> None:
        if self._session is not None:
            await self._session.close()

    @property
    def session(self) -> aiohttp.ClientSession:
        assert self._session is not None, "use the client as an async context manager"
        return self._session

    async def request(self, method: str, path: str, body: JSON | bytes | None = None, *,
                      content_type: str = "application/json", ok: tuple[int, ...] = (200, 201)
                      ) -> JSON:
        data = orjson.dumps(body) if isinstance(body, dict) else body
        headers = {"Content-Type": content_type} if data is not None else None
        async with self.session.request(method, path, data=data, headers=headers) as response:
            raw = await response.read()
            if response.status not in ok:
                raise RequestFailed(method, path, response.status, raw)
            loaded: JSON = orjson.loads(raw)
            return loaded

    async def create(self, collection: str, body: JSON | bytes) -> JSON:
        return await self.request("POST", collection, body)

    async def replace(self, path: str, body: JSON | bytes) -> JSON:
        return await self.request("PUT", path, body)

    async def delete(self, path: str) -> JSON:
        return await self.request("DELETE", path)

    async def get(self, path: str) -> JSON:
        return await self.request("GET", path)

    async def list_timed(self, path: str, *, accept: str = "application/json") -> Listed:
        """GET a collection, timed to its last byte (parsing it is not timed)."""
        started = time.perf_counter()
        size = 0
        async with self.session.get(path, headers={"Accept": accept}) as response:
            if response.status != 200:
                raise RequestFailed("GET", path, response.status, await response.read())
            chunks = []
            async for chunk in response.content.iter_chunked(1 << 20):
                size += len(chunk)
                chunks.append(chunk)
        seconds = time.perf_counter() - started
        body = orjson.loads(b"".join(chunks))
        items = len(body.get("items") or body.get("rows") or [])
        return Listed(seconds, size, items, body.get("metadata", {}).get("continue") or "")

    async def query(self, sql: str, parameters: JSON | None = None) -> list[list[Any]]:
        """Rows of a read-only SQL query through the analytics endpoint."""
        body = await self.request("POST", "/analytics/v1/query",
                                  {"query": sql, "parameters": parameters or {}})
        rows: list[list[Any]] = body["rows"]
        return rows

    async def watch(self, path: str) -> AsyncIterator[tuple[float, JSON]]:
        """Watch events as (arrival time, event), until the server ends the watch."""
        async with self.session.get(path) as response:
            if response.status != 200:
                raise RequestFailed("GET", path, response.status, await response.read())
            async for line in response.content:
                arrived = time.perf_counter()
                if line.strip():
                    yield arrived, orjson.loads(line)
