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

pytestmark = pytest.mark.e2e

FETCH = """
import asyncio, sys
from pathlib import Path
import launcher.broker as broker
broker.FETCH_PAUSES = (0.0, 0.2, 0.2)
try:
    print(asyncio.run(broker.ensure_jars(Path(sys.argv[1]), progress=lambda m: None)))
except broker.BrokerError as err:
    print(err, file=sys.stderr)
    sys.exit(1)
"""


def fetch(cache: Path, home: Path, *, offline: bool) -> subprocess.CompletedProcess[str]:
    # Maven's local repository is under Java's user.home, which ignores $HOME
    env = {**os.environ, "HOME": str(home), "MAVEN_OPTS": f"-Duser.home={home}"}
    argv = [sys.executable, "-c", FETCH, str(cache)]
    return subprocess.run(["unshare", "-n", *argv] if offline else argv, env=env,
                          capture_output=True, text=True, timeout=600, check=False)


@pytest.mark.timeout(700)
def test_a_failed_fetch_says_what_to_do_and_is_tried_again(tmp_path: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("a network namespace of the test's own needs root")
    cache, home = tmp_path / "cache", tmp_path / "home"
    home.mkdir()

    offline = fetch(cache, home, offline=True)
    assert offline.returncode == 1
    lines = offline.stderr.strip().splitlines()
    assert len(lines) == 1, offline.stderr
    assert "could not fetch Apache Kafka" in lines[0]
    assert "after 3 attempts" in lines[0]
    assert "Maven's proxy settings" in lines[0] and "KAFKA_BOOTSTRAP" in lines[0]
    assert "repo.maven.apache.org" in lines[0]  # what could not be reached
    version = next(cache.iterdir())
    assert not (version / "libs").exists() and not (version / "libs.partial").exists()
    assert list((home / ".m2").rglob("*.lastUpdated")), "Maven recorded no failure"

    online = fetch(cache, home, offline=False)
    assert online.returncode == 0, online.stderr[-3000:]
    libs = Path(online.stdout.strip())
    assert libs == version / "libs"
    assert any(p.name.startswith("kafka_2.13-") for p in libs.iterdir())
