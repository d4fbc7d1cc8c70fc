"""Apache Kafka's jars for the embedded broker and the replicated one: pinned
by ``kafka-broker.pom.xml`` beside this file, fetched from Maven Central with
Maven on first use and cached outside the work tree."""

from __future__ import annotations

import asyncio
import fcntl
import os
import re
import shutil
import xml.etree.ElementTree as ET
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import IO

POM = "kafka-broker.pom.xml"


class BrokerError(RuntimeError):
    """The embedded broker could not be fetched, started or reached."""


def kafka_version() -> str:
    """The Kafka version the pinned pom names."""
    ns = {"m": "http://maven.apache.org/POM/4.0.0"}
    root = ET.fromstring(resources.files("launcher.broker").joinpath(POM).read_text())
    node = root.find("m:properties/m:kafka.version", ns)
    assert node is not None and node.text
    return node.text


def default_cache() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "reports-pipeline"



def java() -> str:
    java = shutil.which("java")
    if java is None:
        raise BrokerError("Java 17 or newer is needed to run the embedded Kafka broker"
                          " (apt-get install openjdk-17-jre-headless), or set KAFKA_BOOTSTRAP"
                          " to a Kafka cluster")
    return java


#: Maven's dependency plugin, named in full with its version: Maven then needs
#: no plugin-prefix metadata (``maven-metadata.xml``) to find it
DEPENDENCY_PLUGIN = "org.apache.maven.plugins:maven-dependency-plugin:3.8.1"
#: how often a fetch is tried, and the pause before each try after the first
FETCH_ATTEMPTS = 3
FETCH_PAUSES = (0.0, 3.0, 10.0)


@dataclass(frozen=True)
class Pinned:
    """A set of jars pinned by a POM beside this file, cached under
    ``CACHE/<directory>-<version>/libs``; ``marker`` is a jar there once fetched."""
    pom: str
    directory: str
    marker: str  # with {version}
    what: str  # with {version}, for messages


BROKER = Pinned(POM, "kafka", "kafka_2.13-{version}.jar", "Apache Kafka {version}")
#: MirrorMaker 2 (Kafka Connect's mirror connectors), fetched only when a
#: mirror is run: a fleet whose clusters' Kafka it cannot reach
MIRRORMAKER = Pinned("mirrormaker.pom.xml", "mirrormaker", "connect-mirror-{version}.jar",
                     "Apache Kafka {version}'s MirrorMaker 2")


async def ensure_jars(cache: Path, *, progress: Callable[[str], None],
                      pinned: Pinned = BROKER) -> Path:
    """The directory of the pinned jars, fetched with Maven when missing."""
    version = kafka_version()
    libs = cache / f"{pinned.directory}-{version}" / "libs"
    fetched = libs / pinned.marker.format(version=version)
    if fetched.exists():
        return libs
    libs.parent.mkdir(parents=True, exist_ok=True)
    with open(libs.parent / "fetch.lock", "a") as lock:  # one fetch at a time
        await asyncio.to_thread(fcntl.flock, lock, fcntl.LOCK_EX)
        if fetched.exists():
            return libs
        await _fetch(libs, version, progress, pinned)
    return libs


def fetch_failed(version: str, reason: str, log_file: Path, what: str = "Apache Kafka {version}"
                 ) -> str:
    """The one line a fetch that failed every attempt ends in: what, why, and
    what to do. Pure."""
    return (f"could not fetch {what.format(version=version)}'s jars from Maven Central after"
            f" {FETCH_ATTEMPTS} attempts ({reason}; Maven's output is in {log_file}):"
            " check the network and Maven's proxy settings (~/.m2/settings.xml), or set"
            " KAFKA_BOOTSTRAP to a running Kafka")


def maven_reason(output: Sequence[str]) -> str:
    """The first error Maven printed, without its decoration. Pure."""
    for line in output:
        if line.startswith("[ERROR]"):
            text = re.sub(r"\s*->\s*\[Help 1\]$", "", line[len("[ERROR]"):].strip())
            # the innermost of Maven's nested reasons says most: the artifact
            # and the cause ("Could not transfer artifact ... : Unknown host ...")
            innermost = text.rfind("Could not ")
            text = text[innermost:] if innermost > 0 else text
            text = re.sub(r": transfer failed for \S+:", ":", text)
            if text:
                return text[:400]
    return "Maven exited without saying why"


async def _fetch(libs: Path, version: str, progress: Callable[[str], None],
                 pinned: Pinned) -> None:
    what = pinned.what.format(version=version)
    mvn = shutil.which("mvn")
    if mvn is None:
        raise BrokerError(f"{what} is not in {libs.parent} yet and Maven (mvn)"
                          " is needed to fetch it once (apt-get install maven), or set"
                          " KAFKA_BOOTSTRAP to a Kafka cluster")
    pom = libs.parent / pinned.pom
    pom.write_text(resources.files("launcher.broker").joinpath(pinned.pom).read_text())
    log_file = libs.parent / "fetch.log"
    progress(f"fetching {what} from Maven Central into {libs.parent} (first use only)")
    reason = ""
    with open(log_file, "w") as log_out:
        for attempt, pause in enumerate(FETCH_PAUSES[:FETCH_ATTEMPTS], start=1):
            if attempt > 1:
                progress(f"fetching failed ({reason}); trying again in {pause:.0f} s"
                         f" ({attempt} of {FETCH_ATTEMPTS})")
                await asyncio.sleep(pause)
            partial = libs.with_name("libs.partial")
            shutil.rmtree(partial, ignore_errors=True)
            partial.mkdir(parents=True)
            output = await _maven(mvn, pom, partial, log_out, progress)
            if output is None:
                shutil.rmtree(libs, ignore_errors=True)
                partial.rename(libs)
                progress(f"{what} is cached in {libs.parent}")
                return
            shutil.rmtree(partial, ignore_errors=True)
            reason = maven_reason(output)
    raise BrokerError(fetch_failed(version, reason, log_file, pinned.what))


async def _maven(mvn: str, pom: Path, into: Path, log_out: IO[str],
                 progress: Callable[[str], None]) -> list[str] | None:
    """One run of Maven copying the pom's runtime jars into ``into``: None when
    it succeeded, else its output. ``-U``: a failure an earlier run left in
    the local repository (its ``*.lastUpdated`` markers) is tried again, not
    taken as the answer until the update interval passes."""
    proc = await asyncio.create_subprocess_exec(
        mvn, "-B", "-U", "-f", str(pom), f"{DEPENDENCY_PLUGIN}:copy-dependencies",
        "-DincludeScope=runtime", f"-DoutputDirectory={into}",
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
        stdin=asyncio.subprocess.DEVNULL)
    assert proc.stdout is not None
    output: list[str] = []
    jars = 0
    async for raw in proc.stdout:
        line = raw.decode(errors="replace").rstrip()
        output.append(line)
        log_out.write(line + "\n")
        found = re.search(r"Downloaded from \S+: \S+/([^/ ]+\.jar) \(([^)]*?)(?: at [^)]*)?\)",
                          line)
        if found:
            jars += 1
            progress(f"  {jars:3d} {found.group(1)} ({found.group(2)})")
    log_out.flush()
    return None if await proc.wait() == 0 else output


