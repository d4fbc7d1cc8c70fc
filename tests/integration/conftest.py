"""Integration fixtures: the whole system in-process on the embedded broker and
chDB. chDB allows one data path per process, so every system of a test run
shares one directory; each gets its own database and topic prefix."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import httpx
import pytest

from launcher.system import System
from pipeline.settings import Settings

pytestmark = pytest.mark.integration


@pytest.fixture(scope="session")
def data_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("pipeline")


@pytest.fixture
def make_settings() -> Callable[..., Settings]:
    def make(**overrides: object) -> Settings:
        run = uuid.uuid4().hex[:10]
        return Settings.from_env({}, database=f"t_{run}", topic_prefix=f"t-{run}",
                                 **overrides)
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
    running: list[Running] = []

    async def start_system(settings: Settings) -> Running:
        system = System(settings, data_dir)
        await system.start()
        r = Running(system)
        running.append(r)
        return r

    yield start_system
    for r in reversed(running):
        await r.close()


@pytest.fixture
async def api(start, make_settings) -> httpx.AsyncClient:  # type: ignore[no-untyped-def]
    running = await start(make_settings())
    return running.client
