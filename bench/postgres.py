"""A throwaway PostgreSQL cluster on loopback, from the machine's PostgreSQL
packages (Debian: ``apt-get install postgresql``), for the JSONB baseline."""

from __future__ import annotations

import glob
import os
import shutil
import socket
import subprocess
import tempfile
from pathlib import Path

SETTINGS = {
    # Tuned for a read benchmark on this machine, as an operator would.
    "shared_buffers": "1GB",
    "work_mem": "64MB",
    "effective_cache_size": "8GB",
    "max_parallel_workers_per_gather": "2",
    "fsync": "off",
    "synchronous_commit": "off",
    "full_page_writes": "off",
}


class PostgresMissing(RuntimeError):
    pass


def binaries() -> Path:
    found = shutil.which("pg_ctl")
    if found:
        return Path(found).resolve().parent
    versions = sorted(glob.glob("/usr/lib/postgresql/*/bin/pg_ctl"),
                      key=lambda p: int(Path(p).parts[-3]))
    if not versions:
        raise PostgresMissing("PostgreSQL is not installed: apt-get install postgresql")
    return Path(versions[-1]).parent


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Postgres:
    def __init__(self, base: Path):
        self.bin = binaries()
        self.port = _free_port()
        # PostgreSQL refuses to run as root: run it as the packages' user, in a
        # directory of its own that user can reach.
        self._as = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
        self._own = bool(self._as)
        self.base = Path(tempfile.mkdtemp(prefix="reports-bench-pg-")) if self._own else base
        self.data = self.base / "pgdata"

    @property
    def dsn(self) -> str:
        return f"host=127.0.0.1 port={self.port} user=bench dbname=postgres"

    def _run(self, *args: str) -> None:
        done = subprocess.run([*self._as, *args], capture_output=True, text=True)
        if done.returncode != 0:
            raise RuntimeError(f"{args[0]} failed: {done.stdout}{done.stderr}")

    def start(self) -> None:
        self.base.mkdir(parents=True, exist_ok=True)
        if self._own:
            os.chmod(self.base, 0o777)
        self._run(str(self.bin / "initdb"), "-D", str(self.data), "-U", "bench",
                  "--auth=trust", "-E", "UTF8", "--no-sync")
        options = " ".join(f"-c {k}={v}" for k, v in {
            "listen_addresses": "127.0.0.1", "port": str(self.port),
            "unix_socket_directories": str(self.base), **SETTINGS}.items())
        self._run(str(self.bin / "pg_ctl"), "start", "-D", str(self.data), "-w",
                  "-l", str(self.base / "postgres.log"), "-o", options)

    def stop(self) -> None:
        if (self.data / "postmaster.pid").exists():
            self._run(str(self.bin / "pg_ctl"), "stop", "-D", str(self.data), "-m", "fast")
        if self._own:
            shutil.rmtree(self.base, ignore_errors=True)
