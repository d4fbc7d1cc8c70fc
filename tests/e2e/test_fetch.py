"""The embedded Kafka's jars on a machine with nothing cached: Maven with an
empty local repository, first where no registry is reachable (a network
namespace of the test's own), then with the network. The failure ends in one
line that says what to do, leaves nothing half-fetched, and is not taken as
the answer by the next attempt (Maven's ``*.lastUpdated`` markers)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.e2e.conftest import BIN

pytestmark = pytest.mark.e2e

FETCH = """
import asyncio, sys
from pathlib import Path
import launcher.broker.jars as broker
try:
    print(asyncio.run(broker.ensure_jars(Path(sys.argv[1]), progress=lambda m: None)))
except broker.BrokerError as err:
    print(err, file=sys.stderr)
    sys.exit(1)
"""


def fresh(home: Path) -> dict[str, str]:
    """A machine with nothing cached: Maven's local repository is under Java's
    user.home, which ignores $HOME."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("KAFKA_BOOTSTRAP", "REPORTS_KAFKA_CACHE", "XDG_CACHE_HOME")}
    return {**env, "HOME": str(home), "MAVEN_OPTS": f"-Duser.home={home}"}


@pytest.mark.timeout(700)
def test_a_failed_fetch_says_what_to_do_and_is_tried_again(tmp_path: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("a network namespace of the test's own needs root")
    home = tmp_path / "home"
    home.mkdir()

    # `up` where no registry is reachable, as in a network namespace of a test's
    offline = subprocess.run(["unshare", "-n", str(BIN / "reports-pipeline"), "up",
                              "--data-dir", str(tmp_path / "data")], env=fresh(home),
                             capture_output=True, text=True, timeout=600, check=False)
    assert offline.returncode == 1
    said = offline.stderr.strip().splitlines()
    assert [line for line in said if not line.startswith("reports-pipeline: ")] == said[-1:]
    failed = said[-1]
    assert failed.startswith("reports-pipeline up: could not fetch Apache Kafka"), said
    assert "after 3 attempts" in failed
    assert "Maven's proxy settings" in failed and "KAFKA_BOOTSTRAP" in failed
    assert "repo.maven.apache.org" in failed  # what could not be reached
    assert sum("trying again" in line for line in said) == 2
    cache = home / ".cache" / "reports-pipeline"
    version = next(cache.iterdir())
    assert not (version / "libs").exists() and not (version / "libs.partial").exists()
    assert list((home / ".m2").rglob("*.lastUpdated")), "Maven recorded no failure"

    online = subprocess.run([sys.executable, "-c", FETCH, str(cache)], env=fresh(home),
                            capture_output=True, text=True, timeout=600, check=False)
    assert online.returncode == 0, online.stderr[-3000:]
    libs = Path(online.stdout.strip())
    assert libs == version / "libs"
    assert any(p.name.startswith("kafka_2.13-") for p in libs.iterdir())
