"""A fleet that cannot reach a cluster's Kafka: the cluster's public topics
mirrored into a central Kafka by Apache Kafka's MirrorMaker 2 (as
docs/fleet.md sets it up), and the fleet following the mirrored topics
there. Its reports, counts and results equal the cluster's own."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from launcher.broker.mirror import MirrorMaker
from pipeline.model.resources import RESOURCES
from tests.e2e.conftest import Up, client_for
from tests.e2e.test_fleet import held, in_fleet, sources, until
from tests.helpers import collection_path, report
from tests.kafka import running_broker

pytestmark = pytest.mark.e2e
POLR = RESOURCES[0]


def test_a_fleet_follows_a_cluster_through_mirrormaker(tmp_path: Path) -> None:
    with running_broker(tmp_path / "central") as central:
        started: list[Up] = []
        try:
            asyncio.run(scenario(tmp_path, central, started))
        finally:
            for u in reversed(started):
                u.stop(timeout=60)
                u.kill(group=True)


async def scenario(tmp_path: Path, central: str, started: list[Up]) -> None:
    east = Up(tmp_path / "east", env={"REPORTS_TOPIC_PREFIX": "reports"})
    started.append(east)
    await asyncio.to_thread(east.wait_ready, 180)
    bootstrap = json.loads((east.data_dir / "endpoints.json").read_text())["kafka_bootstrap"]
    mirror = MirrorMaker(tmp_path / "mirror", {"east": bootstrap}, central, replication=1)
    await mirror.start()
    try:
        fleet = Up(tmp_path / "fleet", verb="fleet",
                   args=("--source", f"east={central}/east.reports"))
        started.append(fleet)
        await asyncio.to_thread(fleet.wait_ready)
        async with client_for(east) as api, client_for(fleet) as fleet_api:
            for i in range(30):
                ns = f"team-{i % 3}"
                r = await api.post(collection_path(POLR, ns),
                                   json=report(POLR, f"pod-{i}", ns, fail=i % 4))
                assert r.status_code == 201, r.text
            r = await api.delete(f"{collection_path(POLR, 'team-0')}/pod-0")
            assert r.status_code == 200, r.text

            async def same() -> bool:
                found = await sources(fleet_api)
                return (found.get("east", {}).get("state") == "following"
                        and await held(api) == await in_fleet(fleet_api, "east")
                        and (await held(api))[0][0][0] == 29)
            await until(same, 180)
    finally:
        await mirror.stop()
