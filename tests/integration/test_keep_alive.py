"""The frontend keeps an idle connection 90 s, as kube-apiserver does: a
client reusing one after uvicorn's default 5 s found it closed (the
benchmark's LIST met "Server disconnected")."""

from __future__ import annotations

import asyncio
import socket
import ssl
from pathlib import Path

import uvicorn
from starlette.applications import Starlette
from starlette.responses import PlainTextResponse
from starlette.routing import Route

from apiserver.access.tls import ensure_certificate
from launcher.system import KEEP_ALIVE_SECONDS, https_config


async def _get(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bytes:
    writer.write(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
    await writer.drain()
    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)
    length = int(next(line.split(b":")[1] for line in head.split(b"\r\n")
                      if line.lower().startswith(b"content-length")))
    return head.split(b" ", 2)[1] + b" " + await reader.readexactly(length)


async def test_an_idle_connection_outlives_uvicorns_default(tmp_path: Path) -> None:
    assert KEEP_ALIVE_SECONDS == 90
    cert, key = ensure_certificate(tmp_path)
    app = Starlette(routes=[Route("/", lambda request: PlainTextResponse("ok"))])
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    server = uvicorn.Server(https_config(app, cert=cert, key=key, client_ca=None))
    serving = asyncio.create_task(server.serve(sockets=[sock]))
    try:
        while not server.started:
            await asyncio.sleep(0.01)
        context = ssl.create_default_context(cafile=str(cert))
        reader, writer = await asyncio.open_connection(
            "127.0.0.1", sock.getsockname()[1], ssl=context, server_hostname="localhost")
        assert await _get(reader, writer) == b"200 ok"
        await asyncio.sleep(6)  # past uvicorn's default keep-alive of 5 s
        assert await _get(reader, writer) == b"200 ok"
        writer.close()
    finally:
        server.should_exit = True
        await serving
        sock.close()
