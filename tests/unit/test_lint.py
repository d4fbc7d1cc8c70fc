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


def _deptry(where: Path) -> subprocess.CompletedProcess[str]:
    deptry = Path(sys.executable).parent / "deptry"
    return subprocess.run([str(deptry), ".", "--no-ansi"], cwd=where, capture_output=True,
                          text=True, check=False)


def test_runtime_imports_are_declared_dependencies() -> None:
    """deptry: every module the runtime packages import is a runtime dependency
    (not only a test one, not only a dependency's dependency), so a plain
    `pip install` runs every command."""
    result = _deptry(ROOT)
    assert result.returncode == 0, result.stdout + result.stderr


def test_an_undeclared_import_fails_the_check(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text((ROOT / "pyproject.toml").read_text())
    (tmp_path / "launcher").mkdir()
    (tmp_path / "launcher" / "__init__.py").write_text("")
    # pytest is a test dependency, anyio only httpx's:
    # neither comes with a plain install
    (tmp_path / "launcher" / "cli.py").write_text("import anyio\nimport pytest\n")
    result = _deptry(tmp_path)
    assert result.returncode == 1
    assert "DEP003 'anyio'" in result.stderr and "DEP004 'pytest'" in result.stderr, \
        result.stderr
