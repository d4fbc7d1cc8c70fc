"""Apache Kafka's MirrorMaker 2 in dedicated mode, as a child process: the
public topics (``<prefix>.changes``, ``<prefix>.summaries``) of one or more
clusters' Kafka mirrored into a central Kafka, for a fleet that cannot reach
those clusters' Kafka itself. Each cluster's topics arrive as
``<alias>.<prefix>.changes`` (MirrorMaker's default replication policy), so
the fleet follows them with the prefix ``<alias>.<prefix>``.

Records of transactions a cluster aborted are left out (its consumer reads
``read_committed``); a record mirrored twice after a restart (MirrorMaker
delivers at least once) is one row in the fleet's store all the same.
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Callable, Mapping
from pathlib import Path

from launcher.broker.jars import MIRRORMAKER, BrokerError, default_cache, ensure_jars
from launcher.broker.node import BrokerLayout, java_command, log4j_properties, terminate
from pipeline.runtime.processes import die_with_parent

log = logging.getLogger(__name__)

MAIN = "org.apache.kafka.connect.mirror.MirrorMaker"
ALIAS = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]*$")


def mm2_properties(sources: Mapping[str, str], target: str, *, target_alias: str = "central",
                   prefix: str = "reports", replication: int = 3) -> str:
    """MirrorMaker 2's configuration: ``sources`` (alias -> bootstrap) into
    ``target``'s Kafka, the public topics of ``prefix`` only. Pure."""
    for alias in (*sources, target_alias):
        if not ALIAS.match(alias):
            raise BrokerError(f"cluster alias {alias!r}: letters, digits, '_' and '-'")
    if target_alias in sources:
        raise BrokerError(f"a source cannot be called {target_alias!r}, as the target is")
    topics = re.escape(prefix) + r"\.(changes|summaries)"
    lines = [f"clusters = {', '.join([*sources, target_alias])}",
             f"{target_alias}.bootstrap.servers = {target}"]
    for alias, bootstrap in sources.items():
        lines += [f"{alias}.bootstrap.servers = {bootstrap}",
                  # what a cluster's committer aborted is not the fleet's to see
                  f"{alias}.consumer.isolation.level = read_committed",
                  f"{alias}->{target_alias}.enabled = true",
                  f"{alias}->{target_alias}.topics = {topics}"]
    lines += [
        # the topics only: no consumer groups' offsets, no ACLs, no way back
        "emit.checkpoints.enabled = false", "sync.group.offsets.enabled = false",
        "sync.topic.acls.enabled = false", "refresh.topics.interval.seconds = 10",
        f"replication.factor = {replication}",
        *(f"{t}.replication.factor = {replication}" for t in (
            "checkpoints.topic", "heartbeats.topic", "offset-syncs.topic", "offset.storage",
            "status.storage", "config.storage"))]
    return "\n".join(lines) + "\n"


class MirrorMaker:
    """One MirrorMaker 2 process under ``root``."""

    def __init__(self, root: Path, sources: Mapping[str, str], target: str, *,
                 target_alias: str = "central", prefix: str = "reports", replication: int = 3,
                 cache: Path | None = None, heap: str = "256m",
                 progress: Callable[[str], None] | None = None):
        self.layout = BrokerLayout(root)
        self._config = mm2_properties(sources, target, target_alias=target_alias,
                                      prefix=prefix, replication=replication)
        self._cache = cache or default_cache()
        self._heap = heap
        self._progress = progress or (lambda message: log.info("%s", message))
        self._proc: asyncio.subprocess.Process | None = None

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc else None

    async def start(self) -> None:
        libs = await ensure_jars(self._cache, progress=self._progress, pinned=MIRRORMAKER)
        root = self.layout.root
        root.mkdir(parents=True, exist_ok=True)
        config = root / "mm2.properties"
        config.write_text(self._config)
        self.layout.log4j.write_text(log4j_properties(root / "mirrormaker.log"))
        with open(self.layout.console, "ab") as console:
            self._proc = await asyncio.create_subprocess_exec(
                *java_command(libs, self._heap, self.layout, MAIN, str(config)),
                stdout=console, stderr=asyncio.subprocess.STDOUT,
                stdin=asyncio.subprocess.DEVNULL, preexec_fn=die_with_parent())

    async def stop(self, timeout: float = 30.0) -> None:
        await terminate(self._proc, "MirrorMaker 2", timeout)
