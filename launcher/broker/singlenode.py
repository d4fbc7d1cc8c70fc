"""The embedded Apache Kafka: a single-node KRaft broker (broker and controller
in one JVM) as a child process of ``reports-pipeline up``, its log directories
under ``DATA/kafka``.

Its jars are pinned by ``kafka-broker.pom.xml`` beside this file, fetched from
Maven Central with Maven on first use and cached outside the work tree
(``jars``). The broker's ports are chosen once per data directory and kept, so consumers of
the public topics find it at the same address after a restart, and so does
the broker itself: after a crash its metadata still holds the address it last
registered, and its transaction coordinator writes the markers of the
transactions it finishes there until the new registration replaces it.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Callable
from pathlib import Path

from launcher.broker.jars import BrokerError, default_cache, ensure_jars
from launcher.broker.node import (
    BrokerLayout,
    answers,
    cluster_id,
    format_storage,
    free_port,
    java_command,
    log4j_properties,
    port_free,
    server_properties,
    terminate,
)
from pipeline.runtime.processes import die_with_parent

log = logging.getLogger(__name__)


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
        if not (port and port_free(port)):
            port = free_port()
        if not (controller and controller != port and port_free(controller)):
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
        await terminate(self._proc, "the Kafka broker", timeout)
