"""Requests to one Kubernetes API, over aiohttp: keep-alive connections,
bodies sent as bytes, answers read whole, watches read a line at a time
however long a line is (a report may be MiBs). Every failure is one of
``kubeclient.errors``.

A 429, or a 5xx with ``Retry-After``, says the request was not served: it is
sent again after the time the server asks for (any verb). A 5xx without it
is sent again only for a read, which is safe to repeat; a write may have
been applied, so its caller decides."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Mapping
from typing import Any

import aiohttp
import orjson

from kubeclient.config import Target
from kubeclient.errors import JSON, ConnectionFailed, api_error

#: methods a 5xx without Retry-After may send again
SAFE = frozenset({"GET", "HEAD"})


def retry_after(status: int, header: str | None, method: str, attempt: int) -> float | None:
    """Seconds to wait before sending a request again that was answered
    ``status`` (with ``Retry-After: header``), or None: do not. Pure."""
    if status != 429 and status < 500:
        return None
    if header is not None:
        try:
            return max(0.0, float(header.strip()))
        except ValueError:
            pass  # an HTTP date: Kubernetes sends seconds; back off as without
    if status == 429 or method in SAFE:
        return min(0.25 * 2 ** attempt, 8.0)
    return None


class Client:
    """One Kubernetes API server (``Target``); closed by ``close`` or as an
    async context manager. ``retries``: how often a request the server did not serve is
    sent again (0 for a benchmark, which counts what clients meet)."""

    def __init__(self, target: Target, *, user_agent: str = "reports-pipeline",
                 connections: int = 16, timeout: float | None = 60.0, retries: int = 3,
                 max_wait: float = 30.0):
        self.target = target
        self._user_agent = user_agent
        self._connections = connections
        self._timeout = timeout
        self._retries = retries
        self._max_wait = max_wait
        self._session: aiohttp.ClientSession | None = None

    @property
    def server(self) -> str:
        return self.target.server

    async def __aenter__(self) -> Client:
        return self

    async def __aexit__(self, *_: Any) -> None:
        await self.close()

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    @property
    def session(self) -> aiohttp.ClientSession:
        """The connections, opened by the first request (in its event loop)."""
        if self._session is None:
            self._session = aiohttp.ClientSession(
                self.target.server, headers={"User-Agent": self._user_agent},
                connector=aiohttp.TCPConnector(ssl=self.target.context,
                                               limit=self._connections),
                timeout=aiohttp.ClientTimeout(total=None, sock_connect=10))
        return self._session

    def _failed(self, method: str, path: str, err: BaseException) -> ConnectionFailed:
        return ConnectionFailed(self.target.server,
                                f"{method} {path}: {str(err) or type(err).__name__}")

    async def request(self, method: str, path: str, *, body: JSON | bytes | None = None,
                      params: Mapping[str, str] | None = None,
                      headers: Mapping[str, str] | None = None,
                      content_type: str = "application/json") -> bytes:
        """The body of a 2xx answer; an ``APIError`` for any other."""
        data = orjson.dumps(body) if isinstance(body, dict) else body
        sent = {**(await self.target.headers()), **(headers or {})}
        if data is not None:
            sent["Content-Type"] = content_type
        attempt = 0
        while True:
            try:
                async with asyncio.timeout(self._timeout), self.session.request(
                        method, path, data=data, params=params, headers=sent,
                        server_hostname=self.target.tls_server_name) as response:
                    raw = await response.read()
            except (aiohttp.ClientError, TimeoutError, OSError) as err:
                raise self._failed(method, path, err) from err
            if response.status < 300:
                return raw
            wait = retry_after(response.status, response.headers.get("Retry-After"), method,
                               attempt)
            if wait is None or attempt >= self._retries:
                raise api_error(method, path, response.status, raw)
            attempt += 1
            await asyncio.sleep(min(wait, self._max_wait))

    async def json(self, method: str, path: str, *, body: JSON | bytes | None = None,
                   params: Mapping[str, str] | None = None,
                   headers: Mapping[str, str] | None = None,
                   content_type: str = "application/json") -> JSON:
        """The JSON object of a 2xx answer ({} for an empty one)."""
        raw = await self.request(method, path, body=body, params=params, headers=headers,
                                 content_type=content_type)
        found: JSON = orjson.loads(raw) if raw else {}
        return found

    @contextlib.asynccontextmanager
    async def stream(self, path: str, *, params: Mapping[str, str] | None = None
                     ) -> AsyncIterator[AsyncIterator[JSON]]:
        """A GET whose answer is read a JSON line at a time (a watch): entered
        once the server accepted it (an ``APIError`` if it did not)."""
        try:
            response = await self.session.get(
                path, params=params, headers=await self.target.headers(),
                server_hostname=self.target.tls_server_name)
        except (aiohttp.ClientError, OSError) as err:
            raise self._failed("GET", path, err) from err
        try:
            if response.status != 200:
                raise api_error("GET", path, response.status, await response.read())
            yield self._lines(path, response)
        finally:
            response.close()

    async def _lines(self, path: str, response: aiohttp.ClientResponse) -> AsyncIterator[JSON]:
        started: list[bytes] = []  # a line's pieces so far: joined once
        try:
            async for chunk in response.content.iter_any():
                *ends, rest = chunk.split(b"\n")
                for end in ends:
                    line = b"".join([*started, end])
                    started = []
                    if line.strip():
                        yield orjson.loads(line)
                if rest:
                    started.append(rest)
        except (aiohttp.ClientError, OSError) as err:
            raise self._failed("GET", path, err) from err
