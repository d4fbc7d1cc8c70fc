"""What the HTTP layer refuses is a Kubernetes Status too: a URL past
REPORTS_MAX_URL_BYTES (414), headers past REPORTS_MAX_HEADER_BYTES (431), a
request that is not HTTP (400); and the listener serves on afterwards."""

from __future__ import annotations

import asyncio
import json
import socket

import pytest
import uvicorn

from apiserver.http.httpprotocol import protocol

pytestmark = pytest.mark.integration


async def exchange(port: int, request: bytes) -> tuple[int, dict]:  # type: ignore[type-arg]
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(request)
        await writer.drain()
        raw = await asyncio.wait_for(reader.read(), 10)
    finally:
        writer.close()
    head, _, body = raw.partition(b"\r\n\r\n")
    status = int(head.split(b" ", 2)[1])
    return status, json.loads(body)


async def test_http_refusals_are_statuses(start, make_settings) -> None:  # type: ignore[no-untyped-def]
    settings = make_settings(max_url_bytes=4096, max_header_bytes=8192)
    running = await start(settings)
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(
        running.system.app, log_level="warning", lifespan="off",
        http=protocol(settings.max_url_bytes, settings.max_header_bytes)))
    serving = asyncio.create_task(server.serve(sockets=[sock]))
    auth = f"Authorization: Bearer {running.system.token}\r\n".encode()
    try:
        while not server.started:
            await asyncio.sleep(0.01)
        selector = b"app%20in%20(" + b"a," * 100_000 + b"b)"
        code, status = await exchange(port, b"GET /apis/wgpolicyk8s.io/v1alpha2/policyreports"
                                            b"?labelSelector=" + selector +
                                      b" HTTP/1.1\r\nHost: x\r\n" + auth + b"\r\n")
        assert (code, status["kind"], status["code"]) == (414, "Status", 414)
        assert "REPORTS_MAX_URL_BYTES" in status["message"]

        code, status = await exchange(port, b"GET /apis HTTP/1.1\r\nHost: x\r\n" + auth +
                                      b"X-Padding: " + b"p" * 10_000 + b"\r\n\r\n")
        assert (code, status["kind"], status["reason"]) == (431, "Status",
                                                            "RequestHeaderFieldsTooLarge")

        code, status = await exchange(port, b"NOT HTTP AT ALL\r\n\r\n")
        assert (code, status["kind"], status["reason"]) == (400, "Status", "BadRequest")

        code, status = await exchange(port, b"GET /apis HTTP/1.1\r\nHost: x\r\n" + auth +
                                      b"Connection: close\r\n\r\n")
        assert code == 200 and status["kind"] == "APIGroupList"
    finally:
        server.should_exit = True
        await serving
