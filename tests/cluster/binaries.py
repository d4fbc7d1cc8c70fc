"""The binaries of the real-cluster tier: kube-apiserver, kube-controller-manager
and etcd as the benchmark builds them (``bench.binaries``), and Kyverno and a
client-go program from this tier's own modules (``modules/``), cached the same
way. A cold build of them all takes about ten minutes on two cores."""

from __future__ import annotations

import re
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

from bench import binaries as bench
from bench.binaries import Build, cache_root, go, run_go

MODULES = Path(__file__).resolve().parent / "modules"
HELM_VERSION = "v3.22.0"


def _kyverno() -> Build:
    module = MODULES / "kyverno"
    version = bench.required(module, "github.com/kyverno/kyverno")
    return Build("kyverno", module, ("github.com/kyverno/kyverno/cmd/kyverno",
                                     "github.com/kyverno/kyverno/cmd/reports-controller"),
                 f"-s -w -X github.com/kyverno/kyverno/pkg/version.BuildVersion={version}")


BUILDS: dict[str, Callable[[], Build]] = {
    **bench.BUILDS, "kyverno": _kyverno,
    "clientgo": lambda: Build("clientgo", MODULES / "clientgo", (".",))}


def binaries(name: str) -> Path:
    return bench.built(BUILDS[name]())


def module_source(name: str, dependency: str) -> Path:
    """The source of ``dependency`` as the Go module cache holds it (its
    release manifests and CRDs are read from there)."""
    module = BUILDS[name]().module
    version = bench.required(module, dependency)
    listed = subprocess.run([go(), "mod", "download", "-json", f"{dependency}@{version}"],
                            cwd=module, capture_output=True, text=True, check=True)
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
        run_go(["install", f"helm.sh/helm/v3/cmd/helm@{HELM_VERSION}"],
               env={"GOBIN": str(cache)}, what="helm")
    return str(binary)


if __name__ == "__main__":  # build everything ahead: python -m tests.cluster.binaries
    for each in BUILDS:
        print(each, binaries(each), flush=True)
