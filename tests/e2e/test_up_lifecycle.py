"""``reports-pipeline up`` and its Kafka broker child: killing the parent
outright (SIGKILL, no chance to clean up) must not leave the broker running."""

from __future__ import annotations

import time
from collections.abc import Callable

import psutil

from tests.e2e.conftest import Up


def test_a_killed_up_takes_its_broker_with_it(up: Callable[[], Up]) -> None:
    system = up()
    children = psutil.Process(system.proc.pid).children(recursive=True)
    brokers = [c for c in children if "kafka.Kafka" in c.cmdline()]
    assert len(brokers) == 1, [c.cmdline() for c in children]
    broker = brokers[0]

    system.kill()
    deadline = time.monotonic() + 20
    while broker.is_running() and broker.status() != psutil.STATUS_ZOMBIE:
        assert time.monotonic() < deadline, "the broker outlived its parent"
        time.sleep(0.05)
