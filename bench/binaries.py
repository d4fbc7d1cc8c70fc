"""kube-apiserver and etcd built from their Go modules (``modules/``: each a
small module that requires the upstream one at a pinned version), for the
benchmark's etcd-CRD baseline and the real-cluster test tier. Cached under
``~/.cache/reports-pipeline/cluster`` and built again only when a module's
go.mod, go.sum or sources change: a cold build takes minutes on two cores, a
cached one none."""

from __future__ import annotations

import fcntl
import hashlib
import os
import re
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

MODULES = Path(__file__).resolve().parent / "modules"
#: where Go's own installer puts it, when it is not on the PATH
GO_INSTALLED = Path("/usr/local/go/bin/go")


class BuildUnavailable(RuntimeError):
    """The Go toolchain is missing or a build failed."""


def cache_root() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "reports-pipeline"


def go() -> str:
    found = shutil.which("go") or str(GO_INSTALLED)
    if not Path(found).exists():
        raise BuildUnavailable("the Go toolchain is not installed (kube-apiserver and etcd are"
                               " built from their Go modules with it)")
    return found


def required(module: Path, dependency: str) -> str:
    """The version of ``dependency`` that the module's go.mod requires."""
    text = (module / "go.mod").read_text()
    found = re.search(rf"^\s*(?:require\s+)?{re.escape(dependency)} (v\S+)", text, re.M)
    if found is None:
        raise RuntimeError(f"{module / 'go.mod'} does not require {dependency}")
    return found.group(1)


@dataclass(frozen=True)
class Build:
    name: str
    module: Path  # the directory of its go.mod
    packages: tuple[str, ...]
    ldflags: str = "-s -w"

    def key(self) -> str:
        digest = hashlib.sha256(self.ldflags.encode())
        for path in sorted(self.module.iterdir()):
            if path.suffix in (".go", ".mod", ".sum"):
                digest.update(path.name.encode() + b"\0" + path.read_bytes())
        return digest.hexdigest()[:16]


def kubernetes() -> Build:
    module = MODULES / "kubernetes"
    version = required(module, "k8s.io/kubernetes")
    major, minor = version.lstrip("v").split(".")[:2]
    stamp = " ".join(f"-X k8s.io/component-base/version.{k}={v}" for k, v in (
        ("gitVersion", version), ("gitMajor", major), ("gitMinor", minor),
        ("gitTreeState", "clean")))
    return Build("kubernetes", module, ("k8s.io/kubernetes/cmd/kube-apiserver",
                                        "k8s.io/kubernetes/cmd/kube-controller-manager"),
                 f"-s -w {stamp}")


def etcd() -> Build:
    return Build("etcd", MODULES / "etcd", (".",))


BUILDS: dict[str, Callable[[], Build]] = {"kubernetes": kubernetes, "etcd": etcd}


def built(build: Build) -> Path:
    """The directory holding ``build``'s binaries, built first when the cache
    has none for its current sources."""
    root = cache_root() / "cluster"
    target = root / f"{build.name}-{build.key()}"
    if (target / ".complete").exists():
        return target
    root.mkdir(parents=True, exist_ok=True)
    with open(root / f"{build.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # one build at a time; the others wait for it
        if (target / ".complete").exists():
            return target
        staging = Path(tempfile.mkdtemp(prefix=f"{build.name}-", dir=root))
        try:
            _go_build(build, staging)
        except BaseException:
            shutil.rmtree(staging, ignore_errors=True)
            raise
        (staging / ".complete").touch()
        shutil.rmtree(target, ignore_errors=True)
        staging.rename(target)
    return target


#: what ``go`` prints when it could not fetch a module (the network, the
#: proxy), rather than when the code does not build
FETCH_FAILED = re.compile(r'Get "https?://|dial tcp|i/o timeout|TLS handshake timeout'
                          r"|connection reset|unexpected EOF|reading https?://")
BUILD_ATTEMPTS = 3


def _go_build(build: Build, staging: Path) -> None:
    out = staging / build.name if build.packages == (".",) else staging
    run_go(["build", "-trimpath", f"-ldflags={build.ldflags}", "-o",
            f"{out}{os.sep if out == staging else ''}", *build.packages],
           cwd=build.module, env={"GOFLAGS": "-mod=mod", "CGO_ENABLED": "0"}, what=build.name)


def run_go(args: list[str], *, cwd: Path | None = None, env: dict[str, str] | None = None,
           what: str) -> None:
    """``go`` with ``args``, tried again when a module could not be fetched
    (Go caches no failed download); ``BuildUnavailable`` with one line of
    reason when it still fails."""
    for attempt in range(1, BUILD_ATTEMPTS + 1):
        done = subprocess.run([go(), *args], cwd=cwd, env={**os.environ, **(env or {})},
                              capture_output=True, text=True, check=False)
        if done.returncode == 0:
            return
        failed = [line for line in done.stderr.splitlines() if FETCH_FAILED.search(line)]
        if not failed:
            raise BuildUnavailable(f"building {what} failed (go {args[0]} exited"
                                   f" {done.returncode}):\n{done.stderr[-3000:]}")
        if attempt == BUILD_ATTEMPTS:
            raise BuildUnavailable(
                f"building {what}: could not fetch its Go modules after {attempt} attempts"
                f" ({failed[0].strip()[:300]}): check the network and GOPROXY")
        time.sleep(5 * attempt)


def binaries(name: str) -> Path:
    return built(BUILDS[name]())


if __name__ == "__main__":  # build ahead: python -m bench.binaries
    for each in BUILDS:
        print(each, binaries(each), flush=True)
