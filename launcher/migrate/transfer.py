"""``reports-pipeline migrate in|out``: copy every report between a cluster's
CRDs and the store, and switch which of them serves the report groups.

Two Kubernetes APIs take part: the cluster's (its kubeconfig) and the
store's frontend reached directly (``up``'s kubeconfig, or the Service of an
installed chart behind a port-forward). Which one serves a report group in
the cluster is its APIService: a local one (the CRDs) or one pointing at the
frontend's Service (the store).

- ``in`` copies from the cluster's CRDs to the store (and deletes from the
  store what an earlier run copied and the CRDs no longer hold: before the
  switch nobody else writes there). With ``--switch FILE``
  it then follows the CRDs (watches from the copy's resourceVersions), takes
  over the groups' APIServices with the ones in FILE, and keeps following
  until the CRDs have been quiet for ``--settle`` seconds: a write that
  reached the CRDs before the switch is copied too. A followed change is
  applied only to an object the store has not changed since the copy wrote
  it (a conditional update or delete): a writer that went to the store after
  the switch wins.
- ``out`` copies from the store to the cluster's CRDs. With ``--switch-back``
  it first gives the groups back to the CRDs (deletes the APIServices; the
  kube-apiserver registers the CRDs' own again), then copies; objects written
  to the CRDs since are kept.

Both page through lists, may be run again at any time (an object already at
the destination with the same content is left alone) and end with a summary.
Both Kubernetes APIs are reached through ``api.Api`` (``kubeclient``); the
APIServices are switched in ``switch``.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from kubeclient import APIError
from launcher.migrate.api import CONNECTED, Api, MigrationError, collection, item
from launcher.migrate.objects import (
    COPIED,
    DELETED,
    FAILED,
    JSON,
    KEPT,
    SKIPPED,
    UNCHANGED,
    UPDATED,
    Key,
    Present,
    Tally,
    copy_body,
    digest,
    key_of,
    owned_by_reports,
)
from launcher.migrate.switch import apiservice_name, give_back, served_by, take_over
from pipeline.model.resources import RESOURCES, ResourceType, groups

CRDS = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
#: how long every watch of the CRDs must have held before the switch
HOLD_SECONDS = 1.0


@dataclass
class Copier:
    """Copies objects into ``destination``, knowing what it holds."""
    destination: Api
    #: "update": a differing copy at the destination is replaced (the source
    #: is the truth); "keep": it is left as it is (written since the switch)
    existing: str
    tally: Tally = field(default_factory=Tally)
    held: dict[Key, Present] = field(default_factory=dict)
    #: source uid -> destination uid, for ownerReferences between reports
    uids: dict[str, str] = field(default_factory=dict)

    async def inventory(self, resource: ResourceType, page_size: int) -> int:
        count = 0
        async for items, _ in self.destination.pages(resource, page_size):
            for obj in items:
                self.held[key_of(resource, obj)] = Present.of(obj)
                count += 1
        return count

    async def copy(self, resource: ResourceType, obj: JSON) -> None:
        """Make the destination hold ``obj`` (as the copy pass does)."""
        key = key_of(resource, obj)
        meta = obj.get("metadata") or {}
        if meta.get("deletionTimestamp"):
            self.tally.add(key, SKIPPED, "being deleted at the source")
            return
        body = copy_body(resource, obj, self.uids)
        present = self.held.get(key)
        if present is None:
            try:
                made = await self.destination.call("POST", collection(resource, key.namespace),
                                                   body)
            except APIError as err:
                if err.status != 409:
                    self.tally.add(key, FAILED, err.reason)
                    return
                # there by now (an earlier run, or a writer): compare with it
                try:
                    present = Present.of(await self.destination.call("GET",
                                                                     item(resource, key)))
                except APIError as again:  # and gone again: the next run sees
                    self.tally.add(key, FAILED, again.reason)
                    return
                self.held[key] = present
            else:
                self._held(key, meta, made)
                self.tally.add(key, COPIED)
                return
        self.uids[meta.get("uid", "")] = present.uid
        if present.digest == digest(body):
            self.tally.add(key, UNCHANGED)
        elif self.existing == "keep":
            self.tally.add(key, KEPT)
        else:
            await self._replace(resource, key, meta, body, present)

    async def follow(self, resource: ResourceType, event: JSON) -> None:
        """Apply a change the source's watch reported, unless the destination
        changed the object since this copier last wrote or saw it."""
        obj = event.get("object") or {}
        key = key_of(resource, obj)
        if event.get("type") == "DELETED":
            await self.remove(resource, key)
            return
        present = self.held.get(key)
        if present is None:
            await self.copy(resource, obj)
            return
        body = copy_body(resource, obj, self.uids)
        if present.digest != digest(body):
            await self._replace(resource, key, obj.get("metadata") or {}, body, present)

    async def remove(self, resource: ResourceType, key: Key) -> None:
        """Delete the destination's object of ``key``, unless it changed
        there since this copier last wrote or saw it."""
        present = self.held.get(key)
        if present is None:
            return
        options = {"apiVersion": "v1", "kind": "DeleteOptions",
                   "preconditions": {"resourceVersion": present.resource_version}}
        try:
            await self.destination.call("DELETE", item(resource, key), options)
        except APIError as err:
            if err.status == 409:
                self.tally.add(key, KEPT)
                return
            if err.status != 404:
                self.tally.add(key, FAILED, err.reason)
                return
        self.held.pop(key, None)
        self.tally.add(key, DELETED)

    async def _replace(self, resource: ResourceType, key: Key, meta: JSON, body: JSON,
                       present: Present) -> None:
        """Replace the destination's object with ``body``, on the condition
        that it is still ``present``."""
        conditional = {**body, "metadata": {**body["metadata"],
                                            "resourceVersion": present.resource_version}}
        try:
            made = await self.destination.call("PUT", item(resource, key), conditional)
        except APIError as err:
            if err.status in (404, 409):  # changed or deleted there since: theirs wins
                self.tally.add(key, KEPT)
            else:
                self.tally.add(key, FAILED, err.reason)
            return
        self._held(key, meta, made)
        self.tally.add(key, UPDATED)

    def _held(self, key: Key, meta: JSON, made: JSON) -> None:
        present = Present.of(made)
        self.held[key] = present
        if meta.get("uid"):
            self.uids[meta["uid"]] = present.uid


@dataclass
class Plan:
    direction: str  # "in" or "out"
    page_size: int = 500
    #: copies in flight at once
    concurrency: int = 16
    existing: str = "update"
    #: in: the APIServices to take over with (the chart's), after the copy
    switch: list[JSON] | None = None
    #: out: give the groups back to the CRDs before the copy
    switch_back: bool = False
    settle: float = 5.0


Say = Callable[[str], None]


async def migrate(plan: Plan, *, cluster: Api, store: Api, say: Say) -> Tally:
    """Run a migration; its tally is the summary. ``say`` shows progress."""
    source, destination = (cluster, store) if plan.direction == "in" else (store, cluster)
    resources = await _served(plan, cluster, store, say)
    copier = Copier(destination, plan.existing)
    for resource in resources:
        held = await copier.inventory(resource, plan.page_size)
        if held:
            say(f"{resource.plural}: {destination.name} holds {held:,}")
    versions: dict[str, str] = {}
    deferred: list[tuple[ResourceType, JSON]] = []
    for resource in resources:
        versions[resource.id] = await _copy_all(copier, source, resource, plan, deferred, say)
    for resource, obj in deferred:  # owned by reports: after their owners
        await copier.copy(resource, obj)
    if plan.switch is not None:
        await _follow_and_switch(plan, copier, cluster, resources, versions, say)
    return copier.tally


async def _served(plan: Plan, cluster: Api, store: Api, say: Say) -> list[ResourceType]:
    """The report resources to move (those with a CRD in the cluster); raises
    when the cluster's APIServices say the move makes no sense (the store
    copied into itself) or a CRD is missing for reports the store holds."""
    resources, ours = [], []
    for group, version in groups().items():
        side = await served_by(cluster, group, version)
        name = apiservice_name(group, version)
        if side is not None and side != "crds":
            ours.append(name)
            if plan.direction == "in":
                raise MigrationError(f"{name} is already served by {side}, not by CRDs:"
                                     " nothing to move in (the store would be copied into"
                                     " itself)")
            if not plan.switch_back:
                raise MigrationError(f"{name} is served by {side}: give it back to the CRDs"
                                     " first (--switch-back)")
        resources += [r for r in RESOURCES if (r.group, r.version) == (group, version)]
    usable = []
    for resource in resources:
        try:
            await cluster.call("GET", f"{CRDS}/{resource.plural}.{resource.group}")
        except APIError as err:
            if err.status != 404:
                raise MigrationError(f"reading the CRDs of {cluster.name}: {err.reason}"
                                     ) from err
            if plan.direction == "out" and (await store.call(
                    "GET", collection(resource), params={"limit": "1"})).get("items"):
                raise MigrationError(f"the store holds {resource.plural} but {cluster.name}"
                                     f" has no CRD {resource.plural}.{resource.group}: apply"
                                     " the report CRDs first") from err
            say(f"{resource.plural}: no CRD in {cluster.name}: skipped")
            continue
        usable.append(resource)
    if ours:
        with_crds = {apiservice_name(r.group, r.version) for r in usable}
        await give_back(cluster, ours, say, wait=[n for n in ours if n in with_crds])
    return usable


async def _copy_all(copier: Copier, source: Api, resource: ResourceType, plan: Plan,
                    deferred: list[tuple[ResourceType, JSON]], say: Say) -> str:
    """Copy every object of ``resource``; the list's resourceVersion."""
    read, version, shown = 0, "", 0.0
    listed_keys: set[Key] = set()
    slots = asyncio.Semaphore(plan.concurrency)

    async def one(obj: JSON) -> None:
        async with slots:
            await copier.copy(resource, obj)
    async for items, listed in source.pages(resource, plan.page_size):
        version = listed
        now = []
        for obj in items:
            listed_keys.add(key_of(resource, obj))
            if owned_by_reports(obj):
                deferred.append((resource, obj))
            else:
                now.append(obj)
        # a page's objects are distinct: copied side by side
        await asyncio.gather(*(one(obj) for obj in now))
        read += len(items)
        if items and time.monotonic() - shown > 1:
            shown = time.monotonic()
            say(f"{resource.plural}: {read:,} read, {_progress(copier.tally, resource)}")
    if plan.direction == "in":
        # gone from the CRDs since an earlier run copied them: nobody but the
        # migration writes to the store before the switch
        for key in [k for k in copier.held if k.resource == resource.id
                    and k not in listed_keys]:
            await copier.remove(resource, key)
    say(f"{resource.plural}: {read:,} read, {_progress(copier.tally, resource)} (done)")
    return version


def _progress(tally: Tally, resource: ResourceType) -> str:
    counts: Mapping[str, int] = tally.counts.get(resource.id) or {}
    return ", ".join(f"{n:,} {outcome}" for outcome, n in counts.items()) or "nothing yet"


async def _follow_and_switch(plan: Plan, copier: Copier, cluster: Api,
                             resources: Sequence[ResourceType], versions: dict[str, str],
                             say: Say) -> None:
    """Watch the CRDs from the copy's versions, applying every change, take
    over the APIServices once every watch holds, and stop once the CRDs have
    been quiet for ``plan.settle`` seconds after the switch."""
    assert plan.switch is not None
    events: asyncio.Queue[tuple[ResourceType, JSON]] = asyncio.Queue()
    #: set from just before the switch: from then on a request may reach the
    #: store, so a watch that fails cannot be listed and started again
    switching = asyncio.Event()
    holding = {r.id: asyncio.Event() for r in resources}
    copying_again: set[str] = set()

    async def watch(resource: ResourceType) -> None:
        version = versions[resource.id]
        while True:
            async for event in cluster.watch(resource, version):
                kind = event.get("type")
                if kind == CONNECTED:
                    holding[resource.id].set()
                    continue
                if kind == "ERROR":
                    holding[resource.id].clear()
                    status = event.get("object") or {}
                    if switching.is_set() or status.get("code") != 410:
                        copier.tally.notes.append(
                            f"{resource.plural}: following the CRDs failed during the switch"
                            f" ({status.get('message')}): changes to the CRDs since"
                            f" resourceVersion {version} may be missing from the store")
                        return
                    # too old for the watch cache: copy the whole resource
                    # again (idempotent) and watch from that list
                    say(f"{resource.plural}: the watch's resourceVersion is too old;"
                        " copying again")
                    copying_again.add(resource.id)
                    try:
                        owned: list[tuple[ResourceType, JSON]] = []
                        version = await _copy_all(copier, cluster, resource, plan, owned, say)
                        for again, obj in owned:
                            await copier.copy(again, obj)
                    finally:
                        copying_again.discard(resource.id)
                    break
                version = (event.get("object") or {}).get("metadata", {}).get(
                    "resourceVersion", version)
                if kind != "BOOKMARK":
                    await events.put((resource, event))
            else:
                holding[resource.id].clear()
                if switching.is_set():
                    return  # a new watch would reach the store, not the CRDs
    last = time.monotonic()

    async def apply() -> None:
        nonlocal last
        while True:
            resource, event = await events.get()
            last = time.monotonic()
            await copier.follow(resource, event)
            events.task_done()

    def check(tasks: Sequence[asyncio.Task[None]]) -> None:
        for task in tasks:
            if task.done() and not task.cancelled() and task.exception() is not None:
                raise task.exception()  # type: ignore[misc]

    watchers = [asyncio.create_task(watch(r), name=f"follow {r.plural}") for r in resources]
    applier = asyncio.create_task(apply(), name="apply followed changes")
    try:
        # Every watch started and past its first second (a resourceVersion
        # too old is answered at once), nothing being copied again, the
        # changes so far applied: only then may requests go to the store.
        held_since: float | None = None
        while held_since is None or time.monotonic() - held_since < HOLD_SECONDS:
            check([*watchers, applier])
            if all(e.is_set() for e in holding.values()) and not copying_again:
                held_since = held_since or time.monotonic()
            else:
                held_since = None
            await asyncio.sleep(0.1)
        await events.join()
        say(f"following the CRDs; taking over {len(plan.switch)} APIServices")
        switching.set()
        await take_over(cluster, plan.switch, say)
        since = time.monotonic()
        while True:
            check([*watchers, applier])
            quiet = time.monotonic() - max(last, since)
            if quiet >= plan.settle and events.empty():
                break
            await asyncio.sleep(min(0.25, max(0.05, plan.settle - quiet)))
        await events.join()
        check([*watchers, applier])
    finally:
        for task in (*watchers, applier):
            task.cancel()
        await asyncio.gather(*watchers, applier, return_exceptions=True)
    say(f"the CRDs were quiet for {plan.settle:g} s after the switch: the store serves"
        " every report group")
