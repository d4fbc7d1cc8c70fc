"""``reports-pipeline up`` as a child process on a fresh data directory, so the
system under test has its own process (and its own memory figure) apart from
the load generator."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from pathlib import Path

import psutil

from bench.baseline import directory_bytes
from pipeline.runtime.processes import die_with_parent


class SystemFailed(RuntimeError):
    pass


class RunningSystem:
    def __init__(self, data_dir: Path, env: dict[str, str] | None = None, *,
                 command: tuple[str, ...] = ("up",)):
        self.data_dir = data_dir
        self._command = command
        self.kubeconfig = data_dir / "kubeconfig"
        self._env = env or {}
        self._proc: asyncio.subprocess.Process | None = None
        self.output: list[str] = []
        self._pump: asyncio.Task[None] | None = None

    @property
    def pid(self) -> int:
        assert self._proc is not None
        return self._proc.pid

    def disk(self) -> tuple[int, str]:
        """Bytes of the data directory on disk, and what they are."""
        kafka = directory_bytes(self.data_dir / "kafka")
        total = directory_bytes(self.data_dir)
        return total, (f"the data directory: Kafka's logs {kafka / 2**20:.1f} MiB, the rest"
                       f" (ClickHouse, the worker's tables) {(total - kafka) / 2**20:.1f} MiB")

    def rss(self) -> int:
        return int(psutil.Process(self.pid).memory_info().rss)

    async def start(self, timeout: float = 120) -> None:
        inherited = {k: v for k, v in os.environ.items()
                     if k not in ("KAFKA_BOOTSTRAP", "CLICKHOUSE_URL")}
        self._proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "launcher.cli", *self._command, "--data-dir",
            str(self.data_dir),
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
            env={**inherited, **self._env}, preexec_fn=die_with_parent())
        ready = asyncio.get_running_loop().create_future()
        self._pump = asyncio.create_task(self._read(ready))
        try:
            await asyncio.wait_for(asyncio.shield(ready), timeout)
        except (TimeoutError, SystemFailed):
            await self.stop()
            said = [line.strip() for line in self.output if line.strip()]
            verb = self._command[0]
            if len(said) == 1 and said[0].startswith(f"reports-pipeline {verb}:"):
                raise SystemFailed(said[0]) from None  # a mistake it explained
            raise SystemFailed(f"reports-pipeline {verb} did not become ready:\n"
                               + "".join(self.output[-40:])) from None

    async def _read(self, ready: asyncio.Future[None]) -> None:
        assert self._proc is not None and self._proc.stdout is not None
        async for raw in self._proc.stdout:
            line = raw.decode(errors="replace")
            self.output.append(line)
            if "is ready" in line and not ready.done():
                ready.set_result(None)
        if not ready.done():
            ready.set_exception(SystemFailed("exited"))

    async def stop(self, timeout: float = 60) -> None:
        if self._proc is None:
            return
        if self._proc.returncode is None:
            self._proc.send_signal(signal.SIGTERM)
            try:
                await asyncio.wait_for(self._proc.wait(), timeout)
            except TimeoutError:
                self._proc.kill()
                await self._proc.wait()
        if self._pump is not None:
            await self._pump
