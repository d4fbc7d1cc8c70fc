"""The real control plane and Kyverno for the real-cluster tier, built from
their Go modules (``modules/``: each a small module that requires the upstream
one at a pinned version) and cached under ``~/.cache/reports-pipeline/cluster``,
built again only when a module's go.mod, go.sum or sources change. A cold
build of them all takes about ten minutes on two cores; a cached one, none."""

from __future__ import annotations

import fcntl
import hashlib
import os
import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

MODULES = Path(__file__).resolve().parent / "modules"
HELM_VERSION = "v3.22.0"


def cache_root() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "reports-pipeline"


def go() -> str:
    found = shutil.which("go") or "/usr/local/go/bin/go"
    if not Path(found).exists():
        raise RuntimeError("the Go toolchain is not installed (the real-cluster tier builds"
                           " kube-apiserver, etcd and Kyverno with it)")
    return found


def required(module: str, dependency: str) -> str:
    """The version of ``dependency`` that ``modules/<module>/go.mod`` requires."""
    text = (MODULES / module / "go.mod").read_text()
    found = re.search(rf"^\s*(?:require\s+)?{re.escape(dependency)} (v\S+)", text, re.M)
    if found is None:
        raise RuntimeError(f"modules/{module}/go.mod does not require {dependency}")
    return found.group(1)


@dataclass(frozen=True)
class Build:
    module: str  # a directory of modules/
    packages: tuple[str, ...]
    ldflags: str = "-s -w"

    def key(self) -> str:
        digest = hashlib.sha256(self.ldflags.encode())
        for path in sorted((MODULES / self.module).iterdir()):
            if path.suffix in (".go", ".mod", ".sum"):
                digest.update(path.name.encode() + b"\0" + path.read_bytes())
        return digest.hexdigest()[:16]


def _kubernetes() -> Build:
    version = required("kubernetes", "k8s.io/kubernetes")
    major, minor = version.lstrip("v").split(".")[:2]
    stamp = " ".join(f"-X k8s.io/component-base/version.{k}={v}" for k, v in (
        ("gitVersion", version), ("gitMajor", major), ("gitMinor", minor),
        ("gitTreeState", "clean")))
    return Build("kubernetes", ("k8s.io/kubernetes/cmd/kube-apiserver",
                                "k8s.io/kubernetes/cmd/kube-controller-manager"),
                 f"-s -w {stamp}")


def _kyverno() -> Build:
    version = required("kyverno", "github.com/kyverno/kyverno")
    return Build("kyverno", ("github.com/kyverno/kyverno/cmd/kyverno",
                             "github.com/kyverno/kyverno/cmd/reports-controller"),
                 f"-s -w -X github.com/kyverno/kyverno/pkg/version.BuildVersion={version}")


BUILDS = {"kubernetes": _kubernetes, "etcd": lambda: Build("etcd", (".",)),
          "kyverno": _kyverno, "clientgo": lambda: Build("clientgo", (".",))}


def binaries(name: str) -> Path:
    """The directory holding the binaries of build ``name``, built first when
    the cache has none for its current sources."""
    build = BUILDS[name]()
    root = cache_root() / "cluster"
    target = root / f"{name}-{build.key()}"
    if (target / ".complete").exists():
        return target
    root.mkdir(parents=True, exist_ok=True)
    with open(root / f"{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # one build at a time; the others wait for it
        if (target / ".complete").exists():
            return target
        staging = Path(tempfile.mkdtemp(prefix=f"{name}-", dir=root))
        out = staging / name if build.packages == (".",) else staging
        subprocess.run([go(), "build", "-trimpath", f"-ldflags={build.ldflags}", "-o",
                        f"{out}{os.sep if out == staging else ''}", *build.packages],
                       cwd=MODULES / build.module, check=True,
                       env={**os.environ, "GOFLAGS": "-mod=mod", "CGO_ENABLED": "0"})
        (staging / ".complete").touch()
        shutil.rmtree(target, ignore_errors=True)
        staging.rename(target)
    return target


def module_source(name: str, dependency: str) -> Path:
    """The source of ``dependency`` as the Go module cache holds it (its
    release manifests and CRDs are read from there)."""
    version = required(name, dependency)
    listed = subprocess.run([go(), "mod", "download", "-json", f"{dependency}@{version}"],
                            cwd=MODULES / name, capture_output=True, text=True, check=True)
    found = re.search(r'"Dir":\s*"([^"]+)"', listed.stdout)
    if found is None:
        raise RuntimeError(f"go mod download {dependency}@{version} named no directory")
    return Path(found.group(1))


def helm() -> str:
    """helm from the PATH, or built from the Go module proxy and cached."""
    found = shutil.which("helm")
    if found:
        return found
    cache = cache_root() / "bin"
    binary = cache / "helm"
    if not binary.exists():
        subprocess.run([go(), "install", f"helm.sh/helm/v3/cmd/helm@{HELM_VERSION}"],
                       env={**os.environ, "GOBIN": str(cache)}, check=True, timeout=900)
    return str(binary)


if __name__ == "__main__":  # build everything ahead: python -m tests.cluster.binaries
    for each in BUILDS:
        print(each, binaries(each), flush=True)
