"""The store's pages of current objects and its point reads, against a
brute-force reading of the same changes: every object once, in key order,
its latest version, deletions left out, whatever the page size, the
namespace, a selective condition, or versions spread over unmerged parts."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from pipeline.clickhouse.changes import ChangeWrites
from pipeline.clickhouse.connection import Connection
from pipeline.clickhouse.reads import ObjectReads
from pipeline.model.messages import Change

pytestmark = pytest.mark.integration
R = "policyreports.wgpolicyk8s.io"


def _report(ns: str, name: str, rv: int, team: str) -> dict[str, object]:
    return {"apiVersion": "wgpolicyk8s.io/v1alpha2", "kind": "PolicyReport",
            "metadata": {"namespace": ns, "name": name, "resourceVersion": str(rv),
                         "labels": {"team": team}},
            "results": [], "summary": {"pass": 0, "fail": 0, "warn": 0, "error": 0, "skip": 0}}


async def test_pages_and_gets_match_the_changes(make_settings, data_dir: Path) -> None:  # type: ignore[no-untyped-def]
    rng = random.Random(3)
    clickhouse = Connection(make_settings(), data_dir=data_dir)
    await clickhouse.start()
    writes, store = ChangeWrites(clickhouse), ObjectReads(clickhouse)
    current: dict[tuple[str, str], tuple[int, str] | None] = {}
    rv = 1
    try:
        # three batches (three parts, left unmerged): creates, updates of some,
        # deletions of some
        await clickhouse.run(lambda c: c.command("SYSTEM STOP MERGES reports"))
        for batch in range(3):
            changes = []
            for i in rng.sample(range(300), 200):
                ns, name = f"ns-{i % 4}", f"r-{i:03d}"
                rv += 1
                gone = batch > 0 and rng.random() < 0.2
                team = rng.choice(("a", "b", "b", "b"))
                changes.append(Change("DELETED" if gone else "MODIFIED",
                                      _report(ns, name, rv, team), rv))
                current[(ns, name)] = None if gone else (rv, team)
            await writes.write_changes(changes, topic="t", partition=0, offset=batch)
        live = {k: v for k, v in current.items() if v is not None}

        async def listed(namespace: str | None, limit: int, team: str | None
                         ) -> list[tuple[str, str, int]]:
            conditions = ["labels['team'] = {team:String}"] if team else []
            out, after = [], None
            while True:
                page = await store.list_page(R, namespace=namespace, conditions=conditions,
                                             params={"team": team} if team else {},
                                             after=after, limit=limit)
                out += [(o.namespace, o.name, o.resource_version) for o in page]
                assert len(page) <= limit
                if len(page) < limit:
                    return out
                after = (page[-1].namespace, page[-1].name)

        for namespace in (None, "ns-2"):
            for team in (None, "a"):
                expected = sorted((ns, name, v[0]) for (ns, name), v in live.items()
                                  if (namespace is None or ns == namespace)
                                  and (team is None or v[1] == team))
                for limit in (3, 500):
                    assert await listed(namespace, limit, team) == expected, \
                        (namespace, team, limit)
        for (ns, name), value in sorted(current.items())[:60]:
            got = await store.get(R, ns, name)
            assert (got.resource_version if got else None) == (value[0] if value else None)
        assert await store.get(R, "ns-0", "never") is None
    finally:
        await store.close()
        await clickhouse.close()


async def test_a_key_whose_versions_straddle_a_read_is_read_whole(make_settings, data_dir: Path  # type: ignore[no-untyped-def]
                                                                  ) -> None:
    """Every key has three versions in three unmerged parts, written newest
    first, and most keys' newest is their deletion: a read that stops inside
    a key's versions must not take an older one for the newest."""
    clickhouse = Connection(make_settings(), data_dir=data_dir)
    await clickhouse.start()
    writes, store = ChangeWrites(clickhouse), ObjectReads(clickhouse)
    try:
        await clickhouse.run(lambda c: c.command("SYSTEM STOP MERGES reports"))
        for batch in (2, 1, 0):
            rvs = [1000 * batch + i + 1 for i in range(100)]
            await writes.write_changes(
                [Change("DELETED" if batch == 2 and i % 10 else "MODIFIED",
                        _report("ns", f"r-{i:03d}", rv, "a"), rv) for i, rv in enumerate(rvs)],
                topic="t", partition=0, offset=2 - batch)
        live = [(f"r-{i:03d}", 2001 + i) for i in range(0, 100, 10)]
        for limit in range(1, 25):
            out, after = [], None
            while True:
                page = await store.list_page(R, namespace=None, after=after, limit=limit)
                out += [(o.name, o.resource_version) for o in page]
                if len(page) < limit:
                    break
                after = (page[-1].namespace, page[-1].name)
            assert out == live, limit
    finally:
        await store.close()
        await clickhouse.close()
