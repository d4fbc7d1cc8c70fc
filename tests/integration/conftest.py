"""Integration fixtures: the whole system in-process on a real Apache Kafka
broker (one for the test session, run as ``up`` runs it) and chDB. chDB allows
one data path per process, so every system of a test run shares one
directory; each gets its own database and topic prefix."""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path

import httpx
import pytest
import uvicorn

from launcher.system import System
from pipeline.settings import Settings
from tests.kafka import running_broker

pytestmark = pytest.mark.integration


@pytest.fixture(scope="session")
def data_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("pipeline")


@pytest.fixture(scope="session")
def kafka(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """Bootstrap address of the session's Kafka broker."""
    with running_broker(tmp_path_factory.mktemp("kafka")) as bootstrap:
        yield bootstrap


@pytest.fixture
def make_settings(kafka: str) -> Callable[..., Settings]:
    def make(**overrides: object) -> Settings:
        run = uuid.uuid4().hex[:10]
        return Settings.from_env({}, **{"kafka_bootstrap": kafka, "database": f"t_{run}",
                                        "topic_prefix": f"t-{run}", **overrides})
    return make


class Running:
    def __init__(self, system: System):
        self.system = system
        assert system.app is not None
        self.client = httpx.AsyncClient(
            transport=httpx.ASGITransport(app=system.app), base_url="https://frontend",
            headers={"Authorization": f"Bearer {system.token}"})

    async def close(self) -> None:
        await self.client.aclose()
        await self.system.stop()


@pytest.fixture
async def start(data_dir: Path) -> AsyncIterator[Callable[[Settings], object]]:
    async with contextlib.AsyncExitStack() as running:  # each stops even if one fails
        async def start_system(settings: Settings, *, worker: bool = True) -> Running:
            system = System(settings, data_dir, worker=worker)
            await system.start()
            r = Running(system)
            running.push_async_callback(r.close)
            return r

        yield start_system


@pytest.fixture
async def api(start, make_settings) -> httpx.AsyncClient:  # type: ignore[no-untyped-def]
    running = await start(make_settings())
    return running.client


@contextlib.asynccontextmanager
async def serve(app: object) -> AsyncIterator[str]:
    """Serve an ASGI app over plain HTTP on a loopback port, for streaming clients."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="off"))  # type: ignore[arg-type]
    task = asyncio.create_task(server.serve(sockets=[sock]))
    try:
        while not server.started:
            if task.done():
                await task
            await asyncio.sleep(0.01)
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        await task
        sock.close()


async def watch_until(client: httpx.AsyncClient, url: str, params: dict[str, str],
                      done: Callable[[list[dict]], bool], *, started: asyncio.Event | None = None,
                      timeout: float = 30) -> list[dict]:  # type: ignore[type-arg]
    """Stream a watch until ``done(events)`` holds; ``started`` is set once the
    response headers (so the subscription) are in."""
    events: list[dict] = []  # type: ignore[type-arg]
    async with asyncio.timeout(timeout):
        async with client.stream("GET", url, params={**params, "watch": "true"}) as response:
            assert response.status_code == 200
            if started is not None:
                started.set()
            async for line in response.aiter_lines():
                if line.strip():
                    events.append(json.loads(line))
                    if done(events):
                        return events
    return events
