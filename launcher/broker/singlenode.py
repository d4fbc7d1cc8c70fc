"""The embedded Apache Kafka: a single-node KRaft broker (broker and controller
in one JVM) as a child process of ``reports-pipeline up``, its log directories
under ``DATA/kafka``.

Its jars are pinned by ``kafka-broker.pom.xml`` beside this file, fetched from
Maven Central with Maven on first use and cached outside the work tree. The
broker's ports are chosen once per data directory and kept, so consumers of
the public topics find it at the same address after a restart, and so does
the broker itself: after a crash its metadata still holds the address it last
registered, and its transaction coordinator writes the markers of the
transactions it finishes there until the new registration replaces it.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import fcntl
import json
import logging
import os
import re
import shutil
import socket
import uuid
import xml.etree.ElementTree as ET
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import IO

from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.errors import KafkaError

from pipeline.model.topics import MAX_MESSAGE_BYTES
from pipeline.runtime.logs import quiet
from pipeline.runtime.processes import die_with_parent

log = logging.getLogger(__name__)
POM = "kafka-broker.pom.xml"


class BrokerError(RuntimeError):
    """The embedded broker could not be fetched, started or reached."""


def kafka_version() -> str:
    """The Kafka version the pinned pom names."""
    ns = {"m": "http://maven.apache.org/POM/4.0.0"}
    root = ET.fromstring(resources.files("launcher.broker").joinpath(POM).read_text())
    node = root.find("m:properties/m:kafka.version", ns)
    assert node is not None and node.text
    return node.text


def default_cache() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "reports-pipeline"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _port_free(port: int) -> bool:
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


def _java() -> str:
    java = shutil.which("java")
    if java is None:
        raise BrokerError("Java 17 or newer is needed to run the embedded Kafka broker"
                          " (apt-get install openjdk-17-jre-headless), or set KAFKA_BOOTSTRAP"
                          " to a Kafka cluster")
    return java


#: Maven's dependency plugin, named in full with its version: Maven then needs
#: no plugin-prefix metadata (``maven-metadata.xml``) to find it
DEPENDENCY_PLUGIN = "org.apache.maven.plugins:maven-dependency-plugin:3.8.1"
#: how often a fetch is tried, and the pause before each try after the first
FETCH_ATTEMPTS = 3
FETCH_PAUSES = (0.0, 3.0, 10.0)


async def ensure_jars(cache: Path, *, progress: Callable[[str], None]) -> Path:
    """The directory of the pinned Kafka's jars, fetched with Maven when missing."""
    version = kafka_version()
    libs = cache / f"kafka-{version}" / "libs"
    fetched = libs / f"kafka_2.13-{version}.jar"
    if fetched.exists():
        return libs
    libs.parent.mkdir(parents=True, exist_ok=True)
    with open(libs.parent / "fetch.lock", "a") as lock:  # one fetch at a time
        await asyncio.to_thread(fcntl.flock, lock, fcntl.LOCK_EX)
        if fetched.exists():
            return libs
        await _fetch(libs, version, progress)
    return libs


def fetch_failed(version: str, reason: str, log_file: Path) -> str:
    """The one line a fetch that failed every attempt ends in: what, why, and
    what to do. Pure."""
    return (f"could not fetch Apache Kafka {version}'s jars from Maven Central after"
            f" {FETCH_ATTEMPTS} attempts ({reason}; Maven's output is in {log_file}):"
            " check the network and Maven's proxy settings (~/.m2/settings.xml), or set"
            " KAFKA_BOOTSTRAP to a running Kafka")


def maven_reason(output: Sequence[str]) -> str:
    """The first error Maven printed, without its decoration. Pure."""
    for line in output:
        if line.startswith("[ERROR]"):
            text = re.sub(r"\s*->\s*\[Help 1\]$", "", line[len("[ERROR]"):].strip())
            # the innermost of Maven's nested reasons says most: the artifact
            # and the cause ("Could not transfer artifact ... : Unknown host ...")
            innermost = text.rfind("Could not ")
            text = text[innermost:] if innermost > 0 else text
            text = re.sub(r": transfer failed for \S+:", ":", text)
            if text:
                return text[:400]
    return "Maven exited without saying why"


async def _fetch(libs: Path, version: str, progress: Callable[[str], None]) -> None:
    mvn = shutil.which("mvn")
    if mvn is None:
        raise BrokerError(f"Apache Kafka {version} is not in {libs.parent} yet and Maven (mvn)"
                          " is needed to fetch it once (apt-get install maven), or set"
                          " KAFKA_BOOTSTRAP to a Kafka cluster")
    pom = libs.parent / POM
    pom.write_text(resources.files("launcher.broker").joinpath(POM).read_text())
    log_file = libs.parent / "fetch.log"
    progress(f"fetching Apache Kafka {version} from Maven Central into {libs.parent}"
             " (first start only)")
    reason = ""
    with open(log_file, "w") as log_out:
        for attempt, pause in enumerate(FETCH_PAUSES[:FETCH_ATTEMPTS], start=1):
            if attempt > 1:
                progress(f"fetching failed ({reason}); trying again in {pause:.0f} s"
                         f" ({attempt} of {FETCH_ATTEMPTS})")
                await asyncio.sleep(pause)
            partial = libs.with_name("libs.partial")
            shutil.rmtree(partial, ignore_errors=True)
            partial.mkdir(parents=True)
            output = await _maven(mvn, pom, partial, log_out, progress)
            if output is None:
                shutil.rmtree(libs, ignore_errors=True)
                partial.rename(libs)
                progress(f"Apache Kafka {version} is cached in {libs.parent}")
                return
            shutil.rmtree(partial, ignore_errors=True)
            reason = maven_reason(output)
    raise BrokerError(fetch_failed(version, reason, log_file))


async def _maven(mvn: str, pom: Path, into: Path, log_out: IO[str],
                 progress: Callable[[str], None]) -> list[str] | None:
    """One run of Maven copying the pom's runtime jars into ``into``: None when
    it succeeded, else its output. ``-U``: a failure an earlier run left in
    the local repository (its ``*.lastUpdated`` markers) is tried again, not
    taken as the answer until the update interval passes."""
    proc = await asyncio.create_subprocess_exec(
        mvn, "-B", "-U", "-f", str(pom), f"{DEPENDENCY_PLUGIN}:copy-dependencies",
        "-DincludeScope=runtime", f"-DoutputDirectory={into}",
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
        stdin=asyncio.subprocess.DEVNULL)
    assert proc.stdout is not None
    output: list[str] = []
    jars = 0
    async for raw in proc.stdout:
        line = raw.decode(errors="replace").rstrip()
        output.append(line)
        log_out.write(line + "\n")
        found = re.search(r"Downloaded from \S+: \S+/([^/ ]+\.jar) \(([^)]*?)(?: at [^)]*)?\)",
                          line)
        if found:
            jars += 1
            progress(f"  {jars:3d} {found.group(1)} ({found.group(2)})")
    log_out.flush()
    return None if await proc.wait() == 0 else output


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


def kraft_node(*, node: int, voters: str, port: int, controller_port: int, logs: Path
               ) -> dict[str, str]:
    """A KRaft node on loopback, broker and controller in one: its id, the
    quorum's voters, its listeners and its log directory. Pure."""
    return {
        "process.roles": "broker,controller",
        "node.id": str(node),
        "controller.quorum.voters": voters,
        "listeners": f"PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{controller_port}",
        "advertised.listeners": f"PLAINTEXT://127.0.0.1:{port}",
        "controller.listener.names": "CONTROLLER",
        "inter.broker.listener.name": "PLAINTEXT",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
        "log.dirs": str(logs),
    }


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


class KafkaBroker:
    """One single-node Apache Kafka in KRaft mode under ``root``."""

    def __init__(self, root: Path, *, cache: Path | None = None, heap: str = "256m",
                 progress: Callable[[str], None] | None = None):
        self.layout = BrokerLayout(root)
        self._cache = cache or default_cache()
        self._heap = heap
        self._progress = progress or (lambda message: log.info("%s", message))
        self._proc: asyncio.subprocess.Process | None = None
        self.port = 0

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc else None

    def _ports(self) -> tuple[int, int, str]:
        """The broker's and the controller's ports and the cluster id, kept
        from the last start when those ports are still free."""
        state = self.layout.state
        saved = json.loads(state.read_text()) if state.exists() else {}
        port, controller = saved.get("port", 0), saved.get("controller_port", 0)
        if not (port and _port_free(port)):
            port = free_port()
        if not (controller and controller != port and _port_free(controller)):
            controller = free_port()
        cid = saved.get("cluster_id") or cluster_id()
        state.write_text(json.dumps({"port": port, "controller_port": controller,
                                     "cluster_id": cid}))
        return port, controller, cid

    def _java_command(self, libs: Path, main: str, *args: str) -> list[str]:
        return java_command(libs, self._heap, self.layout, main, *args)

    async def start(self, timeout: float = 60.0) -> None:
        libs = await ensure_jars(self._cache, progress=self._progress)
        layout = self.layout
        layout.logs.mkdir(parents=True, exist_ok=True)
        self.port, controller, cid = self._ports()
        layout.config.write_text(server_properties(port=self.port, controller_port=controller,
                                                   logs=layout.logs))
        layout.log4j.write_text(log4j_properties(layout.log_file))
        if not (layout.logs / "meta.properties").exists():
            await format_storage(libs, self._heap, layout, cid)
        out = open(layout.console, "ab")  # noqa: SIM115 - handed to the child
        try:
            # A session of its own: Ctrl-C in a terminal (SIGINT to the whole
            # foreground process group) reaches `up` alone, which stops the
            # broker after the parts that use it; sharing the group, the
            # broker quit first and every consumer's stop waited on it for
            # its full bound. It still dies with `up` (die_with_parent).
            self._proc = await asyncio.create_subprocess_exec(
                *self._java_command(libs, "kafka.Kafka", str(layout.config)),
                stdout=out, stderr=out, stdin=asyncio.subprocess.DEVNULL,
                start_new_session=True, preexec_fn=die_with_parent())
        finally:
            out.close()
        try:
            await self._wait_ready(timeout)
        except BaseException:
            await self.stop()
            raise

    async def _wait_ready(self, timeout: float) -> None:
        """Until the broker answers metadata requests (it accepts connections a
        little before it can serve them)."""
        assert self._proc is not None
        try:
            async with asyncio.timeout(timeout):
                while True:
                    if self._proc.returncode is not None:
                        raise BrokerError(f"the Kafka broker exited with {self._proc.returncode}:"
                                          f"\n{self._log_tail()}")
                    if await answers(self.bootstrap):
                        return
                    await asyncio.sleep(0.1)
        except TimeoutError as err:
            raise BrokerError(f"the Kafka broker was not ready in {timeout:.0f} s:\n"
                              f"{self._log_tail()}") from err

    def _log_tail(self, lines: int = 20) -> str:
        text = ""
        for path in (self.layout.log_file, self.layout.console):
            with contextlib.suppress(OSError):
                text += "".join(path.read_text(errors="replace").splitlines(True)[-lines:])
        return text or "(no output)"

    async def stop(self, timeout: float = 30.0) -> None:
        proc = self._proc
        if proc is None or proc.returncode is not None:
            return
        proc.terminate()
        try:
            async with asyncio.timeout(timeout):
                await proc.wait()
        except TimeoutError:
            log.warning("the Kafka broker did not stop in %.0f s; killing it", timeout)
            proc.kill()
            await proc.wait()


def java_command(libs: Path, heap: str, layout: BrokerLayout, main: str, *args: str
                 ) -> list[str]:
    """A Kafka tool or server (``main``) on the cached jars, logging under
    ``layout``. The client compiler only (C1): the optimizing one (C2) spent
    more of the machine than the broker's request handling itself for the
    first minute or two of load (1.4 ms of CPU per write against 1.0-1.2),
    on the cores the frontend needs then; C1's code handles the same requests
    for about 0.1 ms more each."""
    return [_java(), f"-Xms{heap}", f"-Xmx{heap}", "-XX:+UseSerialGC",
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


async def answers(bootstrap: str, brokers: int = 1) -> bool:
    """Whether the Kafka at ``bootstrap`` serves metadata with ``brokers``
    brokers registered, and its group and transaction coordinators."""
    port = int(bootstrap.rsplit(":", 1)[1])
    try:
        _, writer = await asyncio.open_connection("127.0.0.1", port)
    except OSError:
        return False
    writer.close()
    with contextlib.suppress(OSError):
        await writer.wait_closed()
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
