"""``reports-pipeline dashboard``: the dashboard's web app on a socket, over a
read-only analytics source (a running ``up`` or a ClickHouse server)."""

from __future__ import annotations

import socket

import uvicorn

from dashboard.app import create_app
from launcher.trends import Analytics


async def serve_dashboard(source: Analytics, sock: socket.socket, *, token: str | None) -> None:
    """Serve until SIGINT or SIGTERM, then close the source."""
    server = uvicorn.Server(uvicorn.Config(create_app(source, token=token), log_level="warning",
                                           access_log=False, lifespan="off"))
    try:
        await server.serve(sockets=[sock])
    finally:
        await source.aclose()
