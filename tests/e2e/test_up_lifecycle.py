"""``reports-pipeline up`` and its Kafka broker child: killing the parent
outright (SIGKILL, no chance to clean up) must not leave the broker running.
When ready, `up` says where everything answers, on its output and in
``DATA/endpoints.json``."""

from __future__ import annotations

import json
import os
import signal
import stat
import time
from collections.abc import Callable

import psutil
from aiokafka.admin import AIOKafkaAdminClient

from tests.e2e.conftest import Kubectl, Up


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


def test_ctrl_c_stops_up_and_its_broker_cleanly(up: Callable[[], Up]) -> None:
    """Ctrl-C in a terminal signals the whole foreground process group: `up`
    alone must get it and stop its parts before its broker (which runs in a
    session of its own), promptly and without a traceback."""
    system = up()
    broker = next(c for c in psutil.Process(system.proc.pid).children(recursive=True)
                  if "kafka.Kafka" in c.cmdline())
    assert os.getpgid(broker.pid) != os.getpgid(system.proc.pid)
    started = time.monotonic()
    os.killpg(system.proc.pid, signal.SIGINT)
    assert system.proc.wait(timeout=60) == 0
    took = time.monotonic() - started
    system.kill()  # closes its output
    output = "".join(system.output)
    assert took < 20, f"stopping took {took:.0f} s:\n{output}"
    assert "Traceback" not in output and " ERROR " not in output, output
    assert not broker.is_running() or broker.status() == psutil.STATUS_ZOMBIE


async def test_up_says_where_it_answers(up: Callable[[], Up]) -> None:
    system = up()
    endpoints = json.loads((system.data_dir / "endpoints.json").read_text())
    frontend = endpoints["frontend"]
    assert frontend.startswith("https://127.0.0.1:")
    assert endpoints["analytics"] == f"{frontend}/analytics/v1/query"
    assert endpoints["topics"] == {"changes": "e2e.changes",
                                   "result-events": "e2e.result-events",
                                   "summaries": "e2e.summaries"}
    output = "".join(system.output)
    kubeconfig = str(system.kubeconfig)
    for said in (f"kubectl --kubeconfig {kubeconfig} get polr -A", f"frontend:   {frontend}",
                 f"kafka:      {endpoints['kafka_bootstrap']} (public topics: e2e.changes,",
                 f"kubectl --kubeconfig {kubeconfig} create --raw /analytics/v1/query -f"):
        assert said in output, output
    # the token is the user's alone
    assert stat.S_IMODE(system.kubeconfig.stat().st_mode) == 0o600
    assert stat.S_IMODE(system.data_dir.stat().st_mode) == 0o700
    # the addresses work: Kafka has the topics, kubectl reaches the frontend
    admin = AIOKafkaAdminClient(bootstrap_servers=endpoints["kafka_bootstrap"])
    await admin.start()
    try:
        assert set(endpoints["topics"].values()) <= set(await admin.list_topics())
    finally:
        await admin.close()
    assert Kubectl(system.kubeconfig).run("get", "polr", "-A").returncode == 0
