"""An acknowledged write survives SIGKILL of `up` and its broker: writers run
against the frontend, the whole process group of `up` is killed with SIGKILL
while they write, `up` starts again on the same data directory, and every
acknowledged response is compared with what the system then serves."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from pipeline.model.resources import RESOURCES
from tests.e2e.conftest import Up, client_for
from tests.helpers import collection_path, report

pytestmark = pytest.mark.e2e
POLR = RESOURCES[0]
WRITERS = 8
UPDATED = 16  # objects that writers keep updating


class Ledger:
    """Every acknowledged write: what the system promised."""

    def __init__(self) -> None:
        self.created: dict[str, int] = {}  # name -> resourceVersion of its create
        self.updated: dict[str, tuple[int, str]] = {}  # name -> (rv, marker) of the last update
        self.versions: list[tuple[int, str]] = []  # (rv, name) of every acknowledged change

    def ack(self, name: str, obj: dict[str, Any], *, update: bool) -> None:
        rv = int(obj["metadata"]["resourceVersion"])
        self.versions.append((rv, name))
        if update:
            self.updated[name] = (rv, obj["metadata"]["labels"]["marker"])
        else:
            self.created[name] = rv


async def writer(api: httpx.AsyncClient, ledger: Ledger, n: int, stop: asyncio.Event) -> None:
    path = collection_path(POLR, "durable")
    i = 0
    while not stop.is_set() and i < 5000:  # bounded: the kill ends it long before
        i += 1
        try:
            if i % 2:
                name = f"w{n}-{i}"
                r = await api.post(path, json=report(POLR, name, "durable"))
                if r.status_code == 201:
                    ledger.ack(name, r.json(), update=False)
            else:
                name = f"u{(n + i) % UPDATED}"
                r = await api.patch(
                    f"{path}/{name}", content=b'{"metadata": {"labels": {"marker": "%d-%d"}}}'
                    % (n, i), headers={"Content-Type": "application/merge-patch+json"})
                if r.status_code == 200:
                    ledger.ack(name, r.json(), update=True)
        except httpx.HTTPError:
            return  # the system is gone: nothing after this was acknowledged


@pytest.mark.timeout(420)
async def test_acknowledged_writes_survive_sigkill(up: Callable[..., Up], tmp_path: Path
                                                   ) -> None:
    first = up()
    address = json.loads((first.data_dir / "endpoints.json").read_text())["kafka_bootstrap"]
    ledger = Ledger()
    stop = asyncio.Event()
    async with client_for(first, timeout=15) as api:
        path = collection_path(POLR, "durable")
        for k in range(UPDATED):
            r = await api.post(path, json=report(POLR, f"u{k}", "durable",
                                                 labels={"marker": "initial"}))
            assert r.status_code == 201, r.text
            ledger.ack(f"u{k}", r.json(), update=True)
        writers = [asyncio.create_task(writer(api, ledger, n, stop)) for n in range(WRITERS)]
        deadline = time.monotonic() + 60
        while len(ledger.versions) < 600:  # kill in the middle of steady writing
            assert time.monotonic() < deadline, "the writers made no progress"
            assert not any(w.done() for w in writers), "a writer stopped early"
            await asyncio.sleep(0.05)
        first.kill(group=True)
        stop.set()
        await asyncio.gather(*writers)
    acknowledged = len(ledger.versions)

    second = up()
    # the broker comes back where its metadata says it is: its transaction
    # coordinator sends the killed committer's abort markers there
    assert json.loads((second.data_dir / "endpoints.json").read_text())["kafka_bootstrap"] \
        == address
    async with client_for(second) as api:
        listed = (await api.get(collection_path(POLR, "durable"))).json()["items"]
        served = {o["metadata"]["name"]: o for o in listed}
        lost = [n for n in ledger.created if n not in served]
        assert not lost, f"{len(lost)} of {len(ledger.created)} acknowledged creates are gone"
        for name, (rv, marker) in ledger.updated.items():
            got = served[name]
            assert int(got["metadata"]["resourceVersion"]) >= rv, \
                f"{name} is older than its last acknowledged update"
            if int(got["metadata"]["resourceVersion"]) == rv:
                assert got["metadata"]["labels"]["marker"] == marker
        rvs = [rv for rv, _ in ledger.versions]
        assert len(set(rvs)) == len(rvs), "a resourceVersion was given to two changes"
        # the first write after the restart may wait for the new committer to
        # take over: a client retries 503/504 (Retry-After), as this does.
        answers: list[str] = []
        try:
            async with asyncio.timeout(150):
                while True:
                    try:
                        r = await api.post(collection_path(POLR, "durable"),
                                           json=report(POLR, "after-restart", "durable"))
                    except httpx.TimeoutException as err:
                        answers.append(repr(err))
                        continue
                    answers.append(f"{r.status_code} {r.text[:200]}")
                    if r.status_code not in (503, 504):
                        break
                    await asyncio.sleep(1)
        except TimeoutError:
            output = "".join(second.output[-200:])
            pytest.fail("no write accepted within 150 s of the restart: "
                        + " | ".join(answers) + "\n" + output)
        if r.status_code == 409:  # an earlier attempt's outcome was unknown, and it landed
            r = await api.get(f"{collection_path(POLR, 'durable')}/after-restart")
        assert r.status_code in (200, 201), r.text
        assert int(r.json()["metadata"]["resourceVersion"]) > max(rvs)
        # Every served version is one the ledger or an unacknowledged write made:
        # none collides with an acknowledged one of another object.
        by_rv = dict(ledger.versions)
        for name, obj in served.items():
            rv = int(obj["metadata"]["resourceVersion"])
            assert by_rv.get(rv, name) == name, f"{name} carries {by_rv[rv]}'s resourceVersion"
    updates = acknowledged - len(ledger.created) - UPDATED
    assert updates > 100, "the writers updated as well as created"
    print(f"acknowledged {acknowledged} writes ({len(ledger.created)} creates, {updates}"
          " updates) before SIGKILL;"
          f" {len(served)} objects served after restart; none lost")
