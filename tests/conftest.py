"""What every tier that runs the system needs is fetched once, after the tests
are collected and before any of them runs: outside any network namespace a
test makes (the real-cluster tier runs `up` in one, where no registry is
reachable), and not against any test's timeout. A fetch that fails fails
only the tests that need what it fetches, with its one-line reason; the
unit tier runs on."""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path

import pytest

from launcher.broker.jars import BrokerError, default_cache, ensure_jars

TESTS = Path(__file__).resolve().parent
#: the tiers that start a Kafka broker (in-process, or as `up` does)
BROKER_TIERS = ("integration", "e2e", "replicated", "cluster")
_jars: dict[str, str] = {}  # "error": why the fetch failed


def _needs_broker(item: pytest.Item) -> bool:
    parts = Path(str(item.fspath)).relative_to(TESTS).parts
    return bool(parts) and parts[0] in BROKER_TIERS


def pytest_collection_finish(session: pytest.Session) -> None:
    if not any(_needs_broker(item) for item in session.items):
        return
    configured = os.environ.get("REPORTS_KAFKA_CACHE")
    cache = Path(configured) if configured else default_cache()
    started = time.monotonic()
    try:
        asyncio.run(ensure_jars(cache, progress=lambda message: None))
    except (BrokerError, OSError) as err:
        _jars["error"] = str(err)
        print(f"\nthe embedded Kafka's jars: {err}", flush=True)
    took = time.monotonic() - started
    if took > 5:
        print(f"\nfetched the embedded Kafka's jars in {took:.0f} s", flush=True)


def pytest_runtest_setup(item: pytest.Item) -> None:
    if "error" in _jars and _needs_broker(item):
        pytest.fail(_jars["error"], pytrace=False)
