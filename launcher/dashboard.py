"""``reports-pipeline dashboard``: the dashboard's web app on a socket, over a
read-only analytics source (a running ``up`` or a ClickHouse server)."""

from __future__ import annotations

import asyncio
import contextlib
import signal
import socket
from collections.abc import Iterator

import uvicorn

from dashboard.app import create_app
from launcher.trends import Analytics


class _Server(uvicorn.Server):
    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield  # SIGINT and SIGTERM stop it cleanly (serve_dashboard), exit status 0


async def serve_dashboard(source: Analytics, sock: socket.socket, *, token: str | None) -> None:
    """Serve until SIGINT or SIGTERM, then close the source."""
    server = _Server(uvicorn.Config(create_app(source, token=token), log_level="warning",
                                    access_log=False, lifespan="off"))
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, lambda: setattr(server, "should_exit", True))
    try:
        await server.serve(sockets=[sock])
    finally:
        await source.aclose()
