"""The baseline the benchmark measures beside the system: the same report kinds
as CRDs in etcd behind kube-apiserver, which is what a cluster runs without
this system. etcd and kube-apiserver are built from their Go modules
(``bench.binaries``) and run on loopback, on a fresh data directory, with
Kyverno's report CRDs as its release ships them (``data/report-crds.yaml``).
Both processes die with the benchmark."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
import stat
import time
from collections.abc import Awaitable, Callable
from functools import partial
from pathlib import Path

import psutil
import yaml
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from bench import binaries
from bench.pki import Authority, key_pem, kubeconfig
from kubeclient import APIConflictError, Client, KubeClientError, target
from pipeline.runtime.processes import die_with_parent

CRDS = Path(__file__).with_name("data") / "report-crds.yaml"


class BaselineFailed(RuntimeError):
    pass


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def directory_bytes(root: Path) -> int:
    """Bytes ``root`` takes on disk (allocated blocks: sparse files count for
    what they hold, preallocated ones for all of it). A file or directory
    that goes away meanwhile (a merge's temporary part) is left out."""
    total = 0
    for folder, _, files in os.walk(root):  # skips what it cannot read
        for path in (folder, *(os.path.join(folder, f) for f in files)):
            with contextlib.suppress(OSError):
                st = os.lstat(path)
                if not stat.S_ISLNK(st.st_mode):
                    total += st.st_blocks * 512
    return total


class _Process:
    def __init__(self, argv: list[str], log: Path):
        self.argv = argv
        self.log = log
        self.proc: asyncio.subprocess.Process | None = None

    async def start(self) -> None:
        with open(self.log, "ab") as out:
            self.proc = await asyncio.create_subprocess_exec(
                *self.argv, stdout=out, stderr=asyncio.subprocess.STDOUT,
                stdin=asyncio.subprocess.DEVNULL, preexec_fn=die_with_parent())

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc is not None and self.proc.returncode is None

    def tail(self, lines: int = 20) -> str:
        text = self.log.read_text(errors="replace") if self.log.exists() else ""
        return "\n".join(text.splitlines()[-lines:])

    async def stop(self, timeout: float = 20) -> None:
        if self.proc is None or self.proc.returncode is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            self.proc.send_signal(signal.SIGTERM)
        try:
            await asyncio.wait_for(self.proc.wait(), timeout)
        except TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                self.proc.kill()
            await self.proc.wait()


class EtcdCrds:
    """etcd and kube-apiserver under ``root``, the report CRDs established.
    ``kubeconfig`` is a system:masters client's."""

    name = "etcd CRDs"

    def __init__(self, root: Path, *, progress: Callable[[str], None] = print):
        self.root = root
        self.data_dir = root / "etcd"
        self._progress = progress
        self._processes: list[_Process] = []
        self._ports: tuple[int, int, int] | None = None
        self.kubeconfig = root / "admin.kubeconfig"

    async def start(self, timeout: float = 180) -> None:
        try:
            await self._start(timeout)
        except BaseException:
            await self.stop()
            raise

    async def _start(self, timeout: float) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        loop = asyncio.get_running_loop()
        self._progress("etcd CRDs: building or finding kube-apiserver and etcd")
        try:
            kubernetes = await loop.run_in_executor(None, binaries.binaries, "kubernetes")
            etcd_dir = await loop.run_in_executor(None, binaries.binaries, "etcd")
        except binaries.BuildUnavailable as err:
            raise BaselineFailed(f"the etcd-CRD baseline cannot be built: {err}; --no-baseline"
                                 " runs the benchmark without it") from err
        pki = self.root / "pki"
        pki.mkdir(exist_ok=True)
        ca = Authority(pki, "kubernetes-ca")
        serving = ca.issue("kube-apiserver", hosts=["127.0.0.1", "localhost"])
        admin = ca.issue("admin", organizations=["system:masters"])
        if not (pki / "sa.key").exists():  # a start again keeps its tokens' key
            sa_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
            (pki / "sa.key").write_bytes(key_pem(sa_key))
            (pki / "sa.pub").write_bytes(sa_key.public_key().public_bytes(
                serialization.Encoding.PEM,
                serialization.PublicFormat.SubjectPublicKeyInfo))
        # a start again on the same directory keeps etcd's member addresses
        self._ports = self._ports or (free_port(), free_port(), free_port())
        client_port, peer, port = self._ports
        etcd_url = f"http://127.0.0.1:{client_port}"
        etcd = _Process([
            str(etcd_dir / "etcd"), "--data-dir", str(self.data_dir),
            "--listen-client-urls", etcd_url, "--advertise-client-urls", etcd_url,
            "--listen-peer-urls", f"http://127.0.0.1:{peer}",
            "--initial-advertise-peer-urls", f"http://127.0.0.1:{peer}",
            "--initial-cluster", f"default=http://127.0.0.1:{peer}",
            "--quota-backend-bytes", str(8 * 1024**3), "--log-level", "warn"],
            self.root / "etcd.log")
        apiserver = _Process([
            str(kubernetes / "kube-apiserver"), f"--etcd-servers={etcd_url}",
            f"--secure-port={port}", "--bind-address=127.0.0.1",
            "--advertise-address=127.0.0.1", "--endpoint-reconciler-type=none",
            f"--tls-cert-file={serving[0]}", f"--tls-private-key-file={serving[1]}",
            f"--client-ca-file={ca.file}",
            "--service-account-issuer=https://kubernetes.default.svc",
            f"--service-account-key-file={pki / 'sa.pub'}",
            f"--service-account-signing-key-file={pki / 'sa.key'}",
            "--service-cluster-ip-range=10.96.0.0/16", "--authorization-mode=Node,RBAC",
            "--profiling=false", "--v=0"], self.root / "kube-apiserver.log")
        self._processes = [etcd, apiserver]
        server = f"https://127.0.0.1:{port}"
        kubeconfig(self.kubeconfig, server=server, ca=ca.pem, cert=admin[0], key=admin[1])
        self._progress("etcd CRDs: starting etcd and kube-apiserver")
        await etcd.start()
        await apiserver.start()
        async with Client(await target(self.kubeconfig), retries=0) as client:
            await self._until(partial(self._ready, client), "kube-apiserver ready", timeout)
            for crd in yaml.safe_load_all(CRDS.read_text()):
                if crd:
                    await self._create(client, crd)
            for crd in yaml.safe_load_all(CRDS.read_text()):
                if crd:
                    name = crd["metadata"]["name"]
                    await self._until(partial(self._established, client, name),
                                      f"CRD {name} established", timeout)
                    for version in crd["spec"]["versions"]:
                        if version.get("served"):
                            path = (f"/apis/{crd['spec']['group']}/{version['name']}/"
                                    f"{crd['spec']['names']['plural']}")
                            await self._until(partial(self._ok, client, path),
                                              f"{path} served", timeout)

    async def _until(self, check: Callable[[], Awaitable[bool]], what: str,
                     timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while not await check():
            for process in self._processes:
                if not process.alive():
                    raise BaselineFailed(f"{what}: {Path(process.argv[0]).name} exited:\n"
                                         f"{process.tail()}")
            if time.monotonic() > deadline:
                raise BaselineFailed(f"{what}: not within {timeout:g} s")
            await asyncio.sleep(0.2)

    @staticmethod
    async def _ok(client: Client, path: str) -> bool:
        try:
            await client.request("GET", path)
        except KubeClientError:
            return False
        return True

    async def _ready(self, client: Client) -> bool:
        try:
            return (await client.request("GET", "/readyz")).strip() == b"ok"
        except KubeClientError:
            return False

    @staticmethod
    async def _create(client: Client, crd: dict[str, object]) -> None:
        try:
            await client.request("POST", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions",
                                 body=crd)
        except APIConflictError:
            pass  # made by an earlier start
        except KubeClientError as err:
            raise BaselineFailed(f"creating {crd['metadata']}: {err}") from err

    @staticmethod
    async def _established(client: Client, name: str) -> bool:
        try:
            found = await client.json(
                "GET", f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{name}")
        except KubeClientError:
            return False
        return any(c["type"] == "Established" and c["status"] == "True"
                   for c in found.get("status", {}).get("conditions", []))

    def pids(self) -> list[int]:
        return [p.pid for p in self._processes if p.alive()]

    def logs(self, lines: int = 40) -> str:
        """The last lines of etcd's and kube-apiserver's logs."""
        return "\n".join(p.tail(lines) for p in self._processes)

    def processes(self) -> list[psutil.Process]:
        return [psutil.Process(pid) for pid in self.pids()]

    def disk(self) -> tuple[int, str]:
        """Bytes of etcd's data directory on disk, and what they are."""
        db = self.data_dir / "member" / "snap" / "db"
        size = db.stat().st_blocks * 512 if db.exists() else 0
        return directory_bytes(self.data_dir), (
            f"etcd's data directory (its database {size / 2**20:.1f} MiB, the rest its"
            " write-ahead log and snapshots)")

    async def stop(self) -> None:
        for process in reversed(self._processes):
            await process.stop()

