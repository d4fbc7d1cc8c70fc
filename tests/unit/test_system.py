"""How the system's parts stop: in reverse order, each bounded in time."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from launcher import system as system_module
from launcher.system import System
from pipeline.settings import Settings


async def test_a_part_that_does_not_stop_leaves_the_others_stopping(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.setattr(system_module, "STOP_SECONDS", 0.05)
    system = System(Settings(), tmp_path)
    stopped: list[str] = []

    async def store() -> None:
        stopped.append("store")

    async def consumer() -> None:
        await asyncio.Event().wait()  # never returns

    async def writer() -> None:
        stopped.append("writer")

    system._on_stop("the store", store)
    system._on_stop("the consumer", consumer)
    system._on_stop("the writer", writer)
    await system.stop()
    assert stopped == ["writer", "store"]
    assert "the consumer did not stop within 0.05 s" in caplog.text
