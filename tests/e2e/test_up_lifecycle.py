"""``reports-pipeline up`` and its children, the Kafka broker and the
aggregation agent: killing the parent outright (SIGKILL, no chance to clean
up) must not leave either running.
When ready, `up` says where everything answers, on its output and in
``DATA/endpoints.json``."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import ssl
import stat
import subprocess
import time
from collections.abc import Callable

import psutil
from aiokafka.admin import AIOKafkaAdminClient

from apiserver.access.tls import ensure_certificate
from pipeline.model.resources import RESOURCES
from tests.e2e.conftest import Kubectl, Up, client_for, kubectl_binary
from tests.helpers import SAMPLE, collection_path


def children(system: Up) -> tuple[psutil.Process, psutil.Process]:
    """`up`'s broker and aggregation agent."""
    brokers, agents = system.children("kafka.Kafka"), system.children("launcher.agentprocess")
    assert len(brokers) == 1 and len(agents) == 1, (brokers, agents)
    return brokers[0], agents[0]


def gone(process: psutil.Process) -> bool:
    return not process.is_running() or process.status() == psutil.STATUS_ZOMBIE


def test_a_killed_up_takes_its_broker_and_agent_with_it(up: Callable[[], Up]) -> None:
    system = up()
    broker, agent = children(system)

    system.kill()
    deadline = time.monotonic() + 20
    while not (gone(broker) and gone(agent)):
        assert time.monotonic() < deadline, (
            "outlived their parent: " + ", ".join(
                name for name, child in (("the broker", broker), ("the agent", agent))
                if not gone(child)))
        time.sleep(0.05)


def test_ctrl_c_stops_up_and_its_children_cleanly(up: Callable[[], Up]) -> None:
    """Ctrl-C in a terminal signals the whole foreground process group: `up`
    alone must get it and stop its parts before its broker and its agent
    (each in a session of its own), promptly and without a traceback."""
    system = up()
    broker, agent = children(system)
    assert os.getpgid(broker.pid) != os.getpgid(system.proc.pid)
    assert os.getpgid(agent.pid) != os.getpgid(system.proc.pid)
    started = time.monotonic()
    os.killpg(system.proc.pid, signal.SIGINT)
    assert system.proc.wait(timeout=60) == 0
    took = time.monotonic() - started
    system.kill()  # closes its output
    output = "".join(system.output)
    assert took < 20, f"stopping took {took:.0f} s:\n{output}"
    assert "Traceback" not in output and " ERROR " not in output, output
    assert gone(broker) and gone(agent)


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


def test_the_kubeconfig_works_on_the_address_served(up: Callable[..., Up], tmp_path) -> None:  # type: ignore[no-untyped-def]
    """The self-signed certificate names the address `up --host` serves on
    (it named loopback alone); a certificate given with --tls-cert-file and
    --tls-private-key-file is served and trusted by the kubeconfig."""
    system = up(args=("--host", "127.0.0.2"))
    assert json.loads((system.data_dir / "endpoints.json").read_text())[
        "frontend"].startswith("https://127.0.0.2:")
    assert "No resources found" in Kubectl(system.kubeconfig).run(
        "get", "polr", "-A").stderr
    system.stop()

    cert, key = ensure_certificate(tmp_path / "given", ["reports.example", "127.0.0.3"])
    system = up(args=("--host", "127.0.0.3", "--tls-cert-file", str(cert),
                      "--tls-private-key-file", str(key)))
    assert "No resources found" in Kubectl(system.kubeconfig).run(
        "get", "polr", "-A").stderr
    served = ssl.get_server_certificate(
        ("127.0.0.3", int(json.loads((system.data_dir / "endpoints.json").read_text())[
            "frontend"].rsplit(":", 1)[1])))
    assert served.strip() == cert.read_text().strip()


async def test_sigterm_ends_open_watches_cleanly_and_promptly(up: Callable[..., Up]) -> None:
    """As a stopping kube-apiserver: every open watch (the garbage collector
    keeps one per resource) ends with a clean end of its stream, at once, and
    the frontend stops within 2 s; no traceback. The web server had waited its
    graceful timeout for them, then cut them (11-12 s, an ASGI traceback per
    watch, INTERNAL_ERROR at the client)."""
    system = up()
    kubectl = subprocess.Popen(
        [kubectl_binary(), "--kubeconfig", str(system.kubeconfig), "get", "ephr", "-A",
         "--watch", "--output-watch-events"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    async with client_for(system) as client:
        ended = asyncio.Event()
        lines: list[str] = []

        async def watch(path: str) -> None:
            async with client.stream("GET", path, params={"watch": "true"}) as response:
                assert response.status_code == 200
                async for line in response.aiter_lines():
                    lines.append(line)
            ended.set()

        paths = [collection_path(r, None) for r in RESOURCES]
        watches = [asyncio.create_task(watch(p)) for p in paths]
        await asyncio.sleep(0)
        # the watches are open: a write shows up on one of them
        await asyncio.to_thread(Kubectl(system.kubeconfig).run, "apply", "-f", str(SAMPLE))
        async with asyncio.timeout(30):
            while not any('"ADDED"' in line for line in lines):
                await asyncio.sleep(0.05)
        started = time.monotonic()
        system.proc.send_signal(signal.SIGTERM)
        async with asyncio.timeout(2):
            await asyncio.gather(*watches)  # each ended without an error
        frontend_closed = time.monotonic() - started
    out, err = kubectl.communicate(timeout=10)
    assert kubectl.returncode == 0, err
    assert "ADDED" in out
    assert system.proc.wait(timeout=60) == 0
    output = "".join(system.output)
    assert "Traceback" not in output and " ERROR " not in output, output
    assert frontend_closed < 2
