"""A plain install, as a new user makes it: README's first command on a fresh
copy of the repository, in a fresh virtual environment, with nothing of the
test environment (no extras, no inherited site-packages, no virtualenv on the
PATH); then the walkthrough's first commands against the `up` it started.
The container image's wheel gets the same treatment in
tests/integration/test_image.py."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

from tests.e2e.conftest import Up

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text()
REPORT = "bb228314-0e3e-42c2-b945-63efe9279ad4"


def fresh_clone(where: Path) -> Path:
    """The repository's files as a clone has them (tracked, and new files not
    ignored), without the work tree's build output, venv or caches."""
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others",
                             "--exclude-standard"], cwd=ROOT, check=True,
                            capture_output=True).stdout.decode().split("\0")
    for name in filter(None, listed):
        source = ROOT / name
        if source.is_file():
            target = where / name
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target)
    return where


def plain_env() -> dict[str, str]:
    """A login shell's environment: no virtualenv, no PYTHONPATH, and a PATH
    without the test environment's scripts (its kubectl among them)."""
    ours = str(Path(sys.executable).parent)
    path = os.pathsep.join(p for p in os.environ.get("PATH", "").split(os.pathsep)
                           if p and Path(p) != Path(ours))
    kept = ("HOME", "LANG", "LC_ALL", "TMPDIR", "JAVA_HOME", "USER", "PIP_INDEX_URL",
            "PIP_EXTRA_INDEX_URL", "XDG_CACHE_HOME")
    return {"PATH": path, **{k: os.environ[k] for k in kept if k in os.environ}}


def first_command() -> list[str]:
    section = README[README.index("\n## Two commands\n"):README.index("\n## Walkthrough\n")]
    first = re.findall(r"```sh\n(.*?)```", section, flags=re.S)[0].strip()
    return first.split(" && ")


def walkthrough_start() -> list[str]:
    """The walkthrough's export, its first apply and the get that follows it."""
    section = README[README.index("\n## Walkthrough\n"):]
    lines = [line[2:] for line in section.splitlines() if line.startswith("$ ")]
    export = next(line for line in lines if line.startswith("export "))
    apply = next(i for i, line in enumerate(lines) if line.startswith("kubectl apply"))
    return [export, lines[apply], lines[apply + 1]]


def test_readmes_first_command_on_a_fresh_clone(tmp_path: Path) -> None:
    clone = fresh_clone(tmp_path / "clone")
    *install, start = first_command()
    assert install == ["python3 -m venv .venv", ".venv/bin/pip install -e ."], install
    env = plain_env()
    for command in install:
        done = subprocess.run(["bash", "-c", command], cwd=clone, env=env, capture_output=True,
                              text=True, timeout=600)
        assert done.returncode == 0, f"$ {command}\n{done.stdout}\n{done.stderr}"
    venv = clone / ".venv"
    # only what the plain install brought: no test dependency is there
    missing = subprocess.run([str(venv / "bin" / "python"), "-c", "import pytest"],
                             capture_output=True, env=env)
    assert missing.returncode != 0

    program, verb, flag, data = start.split()
    assert (program, verb, flag) == (".venv/bin/reports-pipeline", "up", "--data-dir")
    up = Up(clone / data, {**env, "REPORTS_TOPIC_PREFIX": "plain"}, command=clone / program,
            inherit=False, cwd=clone)
    try:
        up.wait_ready()
        export, apply, get = walkthrough_start()
        assert export.startswith("export KUBECONFIG=") and "PATH=$PWD/.venv/bin" in export
        assert apply == "kubectl apply -f reportsamples/data/pss-restricted-report.yaml"
        shell = ["bash", "-c", f"set -e; {export}; command -v kubectl; {apply}; {get}"]
        done = subprocess.run(shell, cwd=clone, env=env, capture_output=True, text=True,
                              timeout=120)
        assert done.returncode == 0, done.stdout + done.stderr
        kubectl, created, header, row = done.stdout.splitlines()
        assert kubectl == str(venv / "bin" / "kubectl")  # the install brought it
        assert created == f"ephemeralreport.reports.kyverno.io/{REPORT} created"
        assert header.split()[:4] == ["NAMESPACE", "NAME", "KIND", "NAME"]
        assert row.split()[:3] == ["kyverno", REPORT, "Pod"]
        assert up.stop() == 0
    finally:
        up.kill(group=True)
