"""A replicated Apache Kafka on loopback from the same jars as the embedded
broker: three (or more) KRaft brokers, each a controller too in the same JVM
("combined"), or beside a quorum of controllers of their own, as Kafka's
documentation advises for production (a controller's failure then takes no
partition leader with it, and losing brokers leaves the quorum whole).

It is set up as production clusters are (Strimzi's, MSK's, Confluent's):
Kafka's own defaults (transaction verification on, Eligible Leader Replicas
on, three replicas of the offsets and transaction state topics with a
minimum of two in sync), plus ``default.replication.factor=3`` and
``min.insync.replicas=2``. Only the heap is small. Each node has its own log
directory and ports under ``root/node-<id>``; the ports and the cluster id
are kept in ``root/cluster.json`` so that a node started again rejoins at the
address its peers know.

The benchmark's fault phases (``bench --kafka-brokers``) and the fault tests
start one, and stop, kill, pause and restart its nodes one by one.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import signal
from collections.abc import Callable, Mapping
from pathlib import Path

from launcher.broker.jars import BrokerError, default_cache, ensure_jars
from launcher.broker.node import (
    BrokerLayout,
    answers,
    cluster_id,
    format_storage,
    free_port,
    java_command,
    kraft_node,
    listens,
    log4j_properties,
    port_free,
)
from pipeline.runtime.processes import die_with_parent

log = logging.getLogger(__name__)

#: what production clusters set beyond Kafka's defaults
PRODUCTION = {"default.replication.factor": "3", "min.insync.replicas": "2"}


def node_properties(*, node: int, port: int, controller_port: int, voters: str,
                    logs: Path, config: Mapping[str, str] | None = None,
                    roles: str = "broker,controller") -> str:
    """One node of the cluster: its roles, listeners and log directory on top
    of Kafka's defaults and :data:`PRODUCTION`, then ``config`` (an
    operator's own settings, as ``bench --kafka-config`` gives them). Pure."""
    props = {
        **kraft_node(node=node, voters=voters, port=port, controller_port=controller_port,
                     logs=logs, roles=roles),
        **PRODUCTION,
        # heap, not behaviour: the log cleaner's dedupe map is 128 MiB by default
        "log.cleaner.dedupe.buffer.size": str(16 * 1024 * 1024),
        **(config or {}),
    }
    return "".join(f"{k}={v}\n" for k, v in props.items())


class KafkaNode:
    """One node's process. Its pid is what a fault test signals."""

    def __init__(self, node_id: int, root: Path, heap: str,
                 roles: str = "broker,controller"):
        self.id = node_id
        self.roles = roles
        self.layout = BrokerLayout(root)
        self.heap = heap
        self.port = 0
        self.controller_port = 0
        self.proc: asyncio.subprocess.Process | None = None
        #: stopped with SIGSTOP, not yet continued
        self.paused = False
        #: started, and not yet registered with the cluster again
        self.starting = False

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def broker(self) -> bool:
        return "broker" in self.roles

    @property
    def controller(self) -> bool:
        return "controller" in self.roles

    @property
    def pid(self) -> int:
        assert self.proc is not None, f"node {self.id} was never started"
        return self.proc.pid

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.returncode is None

    @property
    def serving(self) -> bool:
        """Running, registered and not paused: what its peers can reach. A
        node started again is not, until it has registered: until then the
        cluster may still take it for the incarnation that died, and lead
        partitions from it."""
        return self.running and not self.paused and not self.starting

    async def spawn(self, libs: Path) -> None:
        self.paused = False
        self.starting = True
        out = open(self.layout.console, "ab")  # noqa: SIM115 - handed to the child
        try:
            self.proc = await asyncio.create_subprocess_exec(
                *java_command(libs, self.heap, self.layout, "kafka.Kafka",
                              str(self.layout.config)),
                stdout=out, stderr=out, stdin=asyncio.subprocess.DEVNULL,
                start_new_session=True, preexec_fn=die_with_parent())
        finally:
            out.close()

    def signal(self, signum: int) -> None:
        if self.running:
            os.kill(self.pid, signum)

    async def wait(self) -> None:
        if self.proc is not None:
            await self.proc.wait()

    def log_tail(self, lines: int = 15) -> str:
        text = ""
        for path in (self.layout.log_file, self.layout.console):
            with contextlib.suppress(OSError):
                text += "".join(path.read_text(errors="replace").splitlines(True)[-lines:])
        return f"node {self.id}:\n{text or '(no output)'}"


class KafkaCluster:
    """``brokers`` KRaft brokers under ``root``: nodes 1 to ``brokers``, the
    controllers too if ``controllers`` is 0, else beside as many controllers
    of their own, the nodes after them."""

    def __init__(self, root: Path, *, brokers: int = 3, controllers: int = 0,
                 heap: str = "256m", cache: Path | None = None,
                 progress: Callable[[str], None] | None = None,
                 config: Mapping[str, str] | None = None):
        if brokers < 1 or controllers < 0:
            raise ValueError("a Kafka cluster has at least one broker")
        self.root = root
        self.config = dict(config or {})
        roles = "broker" if controllers else "broker,controller"
        self.nodes = [KafkaNode(i, root / f"node-{i}", heap, roles)
                      for i in range(1, brokers + 1)]
        self.nodes += [KafkaNode(i, root / f"node-{i}", heap, "controller")
                       for i in range(brokers + 1, brokers + controllers + 1)]
        self._cache = cache or default_cache()
        self._progress = progress or (lambda message: log.info("%s", message))
        self._libs: Path | None = None

    @property
    def bootstrap(self) -> str:
        return ",".join(n.bootstrap for n in self.nodes if n.broker)

    def node_ids(self) -> list[int]:
        return [n.id for n in self.nodes]

    def broker_ids(self) -> list[int]:
        return [n.id for n in self.nodes if n.broker]

    def pids(self) -> list[int]:
        """The processes of the nodes running now."""
        return [n.pid for n in self.nodes if n.running]

    def node(self, node_id: int) -> KafkaNode:
        return self.nodes[node_id - 1]

    def _ports(self) -> str:
        """Each node's ports (kept from the last start while free) and the
        cluster id."""
        state = self.root / "cluster.json"
        saved = json.loads(state.read_text()) if state.exists() else {}
        taken: set[int] = set()
        for n in self.nodes:
            mine = saved.get("nodes", {}).get(str(n.id), {})
            for attr in ("port", "controller_port"):
                port = mine.get(attr, 0)
                if not (port and port not in taken and port_free(port)):
                    port = free_port()
                    while port in taken:
                        port = free_port()
                taken.add(port)
                setattr(n, attr, port)
        cid = saved.get("cluster_id") or cluster_id()
        state.write_text(json.dumps({"cluster_id": cid, "nodes": {
            str(n.id): {"port": n.port, "controller_port": n.controller_port}
            for n in self.nodes}}))
        return cid

    async def start(self, timeout: float = 120.0) -> None:
        self._libs = libs = await ensure_jars(self._cache, progress=self._progress)
        self.root.mkdir(parents=True, exist_ok=True)
        cid = self._ports()
        voters = ",".join(f"{n.id}@127.0.0.1:{n.controller_port}"
                          for n in self.nodes if n.controller)
        for n in self.nodes:
            n.layout.logs.mkdir(parents=True, exist_ok=True)
            n.layout.config.write_text(node_properties(
                node=n.id, port=n.port, controller_port=n.controller_port, voters=voters,
                logs=n.layout.logs, config=self.config, roles=n.roles))
            n.layout.log4j.write_text(log4j_properties(n.layout.log_file))
        await asyncio.gather(*(format_storage(libs, n.heap, n.layout, cid)
                               for n in self.nodes
                               if not (n.layout.logs / "meta.properties").exists()))
        for n in self.nodes:
            await n.spawn(libs)
        try:
            await self.wait_ready(timeout)
        except BaseException:
            await self.stop()
            raise

    async def wait_ready(self, timeout: float = 120.0) -> None:
        """Until every running broker is registered and serves metadata and
        the coordinators, and every running controller alone listens."""
        running = [n for n in self.nodes if n.running]
        brokers = [n for n in running if n.broker]
        try:
            async with asyncio.timeout(timeout):
                while True:
                    for n in self.nodes:
                        if n.proc is not None and n.proc.returncode is not None \
                                and n in running:
                            raise BrokerError(f"Kafka node {n.id} exited with"
                                              f" {n.proc.returncode}:\n{n.log_tail()}")
                    if all([await answers(n.bootstrap, len(brokers)) for n in brokers]) \
                            and all([await listens(n.controller_port)
                                     for n in running if not n.broker]):
                        for n in running:
                            n.starting = False
                        return
                    await asyncio.sleep(0.2)
        except TimeoutError as err:
            raise BrokerError(f"the Kafka cluster was not ready in {timeout:.0f} s:\n"
                              + "\n".join(n.log_tail() for n in running)) from err

    # -- faults -----------------------------------------------------------
    def kill(self, node_id: int) -> None:
        """SIGKILL: the node's process dies at once, as in a crash."""
        self.node(node_id).signal(signal.SIGKILL)

    def pause(self, node_id: int) -> None:
        """SIGSTOP: the node stops answering, its connections stay open."""
        self.node(node_id).signal(signal.SIGSTOP)
        self.node(node_id).paused = True

    def resume(self, node_id: int) -> None:
        self.node(node_id).signal(signal.SIGCONT)
        self.node(node_id).paused = False

    def serving(self, node_id: int) -> bool:
        return self.node(node_id).serving

    async def restart(self, node_id: int, timeout: float = 120.0) -> None:
        """Start a node that was killed or stopped, with its disk; return
        once the cluster has every running node registered again."""
        n = self.node(node_id)
        if n.running:
            raise BrokerError(f"Kafka node {node_id} is running")
        assert self._libs is not None
        await n.spawn(self._libs)
        await self.wait_ready(timeout)

    async def stop_node(self, node_id: int, timeout: float = 60.0) -> None:
        """SIGTERM: the node hands its leaderships over and shuts down."""
        n = self.node(node_id)
        if not n.running:
            return
        n.signal(signal.SIGCONT)  # a paused node cannot stop
        n.paused = False
        n.signal(signal.SIGTERM)
        try:
            async with asyncio.timeout(timeout):
                await n.wait()
        except TimeoutError:
            log.warning("Kafka node %d did not stop in %.0f s; killing it", node_id, timeout)
            n.signal(signal.SIGKILL)
            await n.wait()

    def active_controller(self) -> int:
        """The id of the KRaft quorum's leader, as the nodes record it
        (``quorum-state`` of the metadata log: the newest epoch wins)."""
        best = (-1, -1)
        for n in self.nodes:
            path = n.layout.logs / "__cluster_metadata-0" / "quorum-state"
            with contextlib.suppress(OSError, ValueError):
                state = json.loads(path.read_text())
                best = max(best, (int(state.get("leaderEpoch", -1)),
                                  int(state.get("leaderId", -1))))
        if best[1] < 0:
            raise BrokerError("no Kafka node records a quorum leader")
        return best[1]

    async def stop(self) -> None:
        # Every broker at once (one by one, the last would wait for a quorum
        # of combined nodes), then the controllers of their own: a broker's
        # shutdown waits for a controller to let it go.
        await asyncio.gather(*(self.stop_node(n.id) for n in self.nodes if n.broker))
        await asyncio.gather(*(self.stop_node(n.id) for n in self.nodes if not n.broker))
