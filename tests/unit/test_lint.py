"""ruff and mypy stay clean."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", *args], cwd=ROOT, capture_output=True,
                          text=True, check=False)


def test_ruff() -> None:
    result = _run("ruff", "check", "apiserver", "pipeline", "launcher", "tests")
    assert result.returncode == 0, result.stdout + result.stderr


def test_mypy() -> None:
    result = _run("mypy")
    assert result.returncode == 0, result.stdout + result.stderr
