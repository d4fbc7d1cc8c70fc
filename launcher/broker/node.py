"""One KRaft node on this machine: its directories, its configuration, the
Java command that runs Kafka's tools and servers on the cached jars, and
whether it answers. Shared by the single node and the replicated cluster."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import logging
import socket
import uuid
from dataclasses import dataclass
from pathlib import Path

from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.errors import KafkaError

from launcher.broker.jars import BrokerError, java
from pipeline.model.topics import MAX_MESSAGE_BYTES
from pipeline.runtime.logs import quiet

log = logging.getLogger(__name__)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def port_free(port: int) -> bool:
    """Whether the broker can listen on ``port`` again. With SO_REUSEADDR, as
    the JVM's server sockets have it: the connections a killed broker leaves
    in TIME_WAIT do not keep it from the port, only a listener does."""
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


@dataclass(frozen=True)
class BrokerLayout:
    """Where one data directory's broker keeps its state."""

    root: Path

    @property
    def logs(self) -> Path:
        return self.root / "logs"

    @property
    def state(self) -> Path:
        return self.root / "broker.json"

    @property
    def config(self) -> Path:
        return self.root / "server.properties"

    @property
    def log4j(self) -> Path:
        return self.root / "log4j2.properties"

    @property
    def log_file(self) -> Path:
        return self.root / "broker.log"

    @property
    def console(self) -> Path:
        return self.root / "console.log"


def kraft_node(*, node: int, voters: str, port: int, controller_port: int, logs: Path,
               roles: str = "broker,controller") -> dict[str, str]:
    """A KRaft node on loopback: its id and ``roles`` (a broker and a
    controller in one, or either alone), the quorum's voters, its listeners
    and its log directory. A controller alone listens on ``controller_port``
    only, a broker alone on ``port`` only. Pure."""
    broker, controller = "broker" in roles, "controller" in roles
    listeners = [f"PLAINTEXT://127.0.0.1:{port}"] if broker else []
    listeners += [f"CONTROLLER://127.0.0.1:{controller_port}"] if controller else []
    props = {
        "process.roles": roles,
        "node.id": str(node),
        "controller.quorum.voters": voters,
        "listeners": ",".join(listeners),
        "controller.listener.names": "CONTROLLER",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
        "log.dirs": str(logs),
    }
    if broker:
        props["advertised.listeners"] = f"PLAINTEXT://127.0.0.1:{port}"
        props["inter.broker.listener.name"] = "PLAINTEXT"
    return props


def server_properties(*, port: int, controller_port: int, logs: Path) -> str:
    """A single-node KRaft broker on loopback, sized for one machine. Pure."""
    props = {
        **kraft_node(node=1, voters=f"1@127.0.0.1:{controller_port}", port=port,
                     controller_port=controller_port, logs=logs),
        # One node: every internal topic has one replica and one partition.
        "offsets.topic.replication.factor": "1",
        "offsets.topic.num.partitions": "1",
        "transaction.state.log.replication.factor": "1",
        "transaction.state.log.min.isr": "1",
        "transaction.state.log.num.partitions": "1",
        "share.coordinator.state.topic.replication.factor": "1",
        "share.coordinator.state.topic.min.isr": "1",
        "share.coordinator.state.topic.num.partitions": "1",
        "group.initial.rebalance.delay.ms": "0",
        # Every topic is created by the system, with its own policy.
        "auto.create.topics.enable": "false",
        "message.max.bytes": str(MAX_MESSAGE_BYTES),
        "replica.fetch.max.bytes": str(MAX_MESSAGE_BYTES),
        "num.network.threads": "2",
        "num.io.threads": "4",
        "background.threads": "4",
        "num.recovery.threads.per.data.dir": "2",
        "log.retention.check.interval.ms": "60000",
        # The log cleaner's dedupe map lives on the heap, 128 MiB of it by
        # default: the compacted topics here (consumer offsets, transaction
        # state, summaries, Faust's tables) need a fraction of that.
        "log.cleaner.dedupe.buffer.size": str(16 * 1024 * 1024),
        # Fewer wake-ups while idle: the only broker talks to its own controller.
        "broker.heartbeat.interval.ms": "4000",
        "broker.session.timeout.ms": "18000",
    }
    return "".join(f"{k}={v}\n" for k, v in props.items())


def log4j_properties(log_file: Path) -> str:
    """Warnings, the broker's start and stop and its transaction coordinator's
    decisions, in a file of bounded size."""
    return f"""status = warn
appender.file.type = RollingFile
appender.file.name = file
appender.file.fileName = {log_file}
appender.file.filePattern = {log_file}.%i
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = [%d] %p %m (%c)%n
appender.file.policies.type = Policies
appender.file.policies.size.type = SizeBasedTriggeringPolicy
appender.file.policies.size.size = 10MB
appender.file.strategy.type = DefaultRolloverStrategy
appender.file.strategy.max = 3
rootLogger.level = WARN
rootLogger.appenderRef.file.ref = file
logger.server.name = kafka.server.KafkaRaftServer
logger.server.level = INFO
logger.broker.name = kafka.server.BrokerServer
logger.broker.level = INFO
logger.transactions.name = kafka.coordinator.transaction
logger.transactions.level = INFO
"""


def java_command(libs: Path, heap: str, layout: BrokerLayout, main: str, *args: str
                 ) -> list[str]:
    """A Kafka tool or server (``main``) on the cached jars, logging under
    ``layout``. The client compiler only (C1): the optimizing one (C2) spent
    more of the machine than the broker's request handling itself for the
    first minutes of load, on the cores the frontend needs then; C1's code
    handles each request only a little slower."""
    return [java(), f"-Xms{heap}", f"-Xmx{heap}", "-XX:+UseSerialGC",
            "-XX:+AlwaysPreTouch", "-XX:MaxMetaspaceSize=256m", "-Xss512k",
            "-XX:-UsePerfData", "-XX:TieredStopAtLevel=1", "-XX:CICompilerCount=1",
            "-Djava.awt.headless=true", f"-Dkafka.logs.dir={layout.root}",
            f"-Dlog4j2.configurationFile={layout.log4j}",
            "-cp", f"{libs}/*", main, *args]


async def format_storage(libs: Path, heap: str, layout: BrokerLayout, cluster_id: str) -> None:
    """Format a KRaft node's log directories for ``cluster_id`` (once: a
    formatted directory is left as it is)."""
    proc = await asyncio.create_subprocess_exec(
        *java_command(libs, heap, layout, "kafka.tools.StorageTool", "format",
                      f"--cluster-id={cluster_id}", "--config", str(layout.config),
                      "--ignore-formatted"),
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
        stdin=asyncio.subprocess.DEVNULL)
    output, _ = await proc.communicate()
    if proc.returncode != 0:
        raise BrokerError(f"formatting Kafka's log directory {layout.logs} failed:\n"
                          + output.decode(errors="replace"))


def cluster_id() -> str:
    """A Kafka cluster id: 16 random bytes in URL-safe base64, unpadded, not
    starting with '-' (as Kafka's own ``Uuid.randomUuid``)."""
    while True:
        value = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not value.startswith("-"):
            return value


async def listens(port: int) -> bool:
    """Whether something accepts connections on loopback's ``port``."""
    try:
        _, writer = await asyncio.open_connection("127.0.0.1", port)
    except OSError:
        return False
    writer.close()
    with contextlib.suppress(OSError):
        await writer.wait_closed()
    return True


async def answers(bootstrap: str, brokers: int = 1) -> bool:
    """Whether the Kafka at ``bootstrap`` serves metadata with ``brokers``
    brokers registered, and its group and transaction coordinators."""
    if not await listens(int(bootstrap.rsplit(":", 1)[1])):
        return False
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=2000)
    # a node of a cluster still starting, or stopped on purpose, is no error
    with quiet("aiokafka"):
        try:
            await admin.start()
            if len((await admin.describe_cluster())["brokers"]) < brokers:
                return False
            # Groups and transactions need their coordinators (and their
            # topics, made on first use): clients would log errors while
            # they load.
            await admin.find_coordinator("reports-pipeline", 0)
            await admin.find_coordinator("reports-pipeline", 1)
            return True
        except (KafkaError, OSError):
            return False
        finally:
            with contextlib.suppress(KafkaError, OSError):
                await admin.close()


async def terminate(proc: asyncio.subprocess.Process | None, what: str, timeout: float) -> None:
    """SIGTERM ``proc`` (a Java process of ours, ``what`` for the log) and
    wait ``timeout`` for it to end, then SIGKILL it."""
    if proc is None or proc.returncode is not None:
        return
    proc.terminate()
    try:
        async with asyncio.timeout(timeout):
            await proc.wait()
    except TimeoutError:
        log.warning("%s did not stop in %.0f s; killing it", what, timeout)
        proc.kill()
        await proc.wait()
