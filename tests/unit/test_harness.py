"""The real-cluster tier's processes: one that fails to start leaves no open
file and no process behind (a log file left open is reported, when it is
collected, as a failure of whichever test runs then)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import psutil
import pytest

from tests.cluster.controlplane import Process, wait_until


class Here:
    """The test's own network namespace: commands run as they are."""

    def command(self, argv: Sequence[str]) -> list[str]:
        return list(argv)


def test_a_process_that_fails_to_start_leaves_nothing_open(tmp_path: Path) -> None:
    log = tmp_path / "program.log"
    process = Process(Here(), ["sh", "-c", "echo cannot start; exit 3"], log)  # type: ignore[arg-type]
    with pytest.raises(AssertionError, match="cannot start"):
        wait_until(lambda: False, "ready", timeout=30, alive=[process])
    assert str(log) not in {f.path for f in psutil.Process().open_files()}
    assert process.stop() == 3
    assert process.proc.pid not in {c.pid for c in psutil.Process().children(recursive=True)}
