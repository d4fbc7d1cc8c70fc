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
        out = staging / build.name if build.packages == (".",) else staging
        try:
            subprocess.run([go(), "build", "-trimpath", f"-ldflags={build.ldflags}", "-o",
                            f"{out}{os.sep if out == staging else ''}", *build.packages],
                           cwd=build.module, check=True,
                           env={**os.environ, "GOFLAGS": "-mod=mod", "CGO_ENABLED": "0"})
        except subprocess.CalledProcessError as err:
            shutil.rmtree(staging, ignore_errors=True)
            raise BuildUnavailable(f"building {build.name} failed (go build exited"
                                   f" {err.returncode})") from err
        (staging / ".complete").touch()
        shutil.rmtree(target, ignore_errors=True)
        staging.rename(target)
    return target


def binaries(name: str) -> Path:
    return built(BUILDS[name]())


if __name__ == "__main__":  # build ahead: python -m bench.binaries
    for each in BUILDS:
        print(each, binaries(each), flush=True)
