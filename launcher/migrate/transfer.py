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
Both Kubernetes APIs are reached with ``kubeclient``.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import yaml

from kubeclient import APIError, APIGoneError, Client, ConnectionFailed, Target
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
from pipeline.model.resources import RESOURCES, ResourceType, groups

APISERVICES = "/apis/apiregistration.k8s.io/v1/apiservices"
CRDS = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
#: the label kube-apiserver puts on the APIServices it registers for CRDs
#: (and keeps in sync while it is there)
AUTOMANAGED = "kube-aggregator.kubernetes.io/automanaged"
REQUEST_SECONDS = 60.0
MANAGER = "reports-pipeline-migrate"
#: the event ``Api.watch`` yields first, once the server accepted the watch
CONNECTED = "CONNECTED"
#: how long every watch of the CRDs must have held before the switch
HOLD_SECONDS = 1.0


class MigrationError(RuntimeError):
    """The migration cannot go on (a reason for the user, no traceback)."""


class Api:
    """One Kubernetes API (``kubeclient``), named for messages."""

    def __init__(self, target: Target, name: str):
        self.target = target
        self.name = name
        # the copies' managedFields name this manager
        self._client = Client(target, user_agent=f"{MANAGER}/1", timeout=REQUEST_SECONDS)

    async def __aenter__(self) -> Api:
        return self

    async def __aexit__(self, *_: Any) -> None:
        await self._client.close()

    async def call(self, method: str, path: str, body: JSON | None = None,
                   params: dict[str, str] | None = None) -> JSON:
        """The response body of a 2xx answer; ``APIError`` otherwise."""
        try:
            return await self._client.json(method, path, body=body, params=params)
        except ConnectionFailed as err:
            raise MigrationError(f"{self.name} ({err.server}): {err.detail}") from err

    async def pages(self, resource: ResourceType, limit: int
                    ) -> AsyncIterator[tuple[list[JSON], str]]:
        """Every object of ``resource`` in every namespace, a page at a time,
        with the list's resourceVersion (of the last page: a watch starts
        there). A continue token that expired starts the list again."""
        token = ""
        while True:
            params = {"limit": str(limit)}
            if token:
                params["continue"] = token
            try:
                page = await self.call("GET", collection(resource), params=params)
            except APIGoneError:
                if token:
                    token = ""  # the snapshot is gone: again (copies are idempotent)
                    continue
                raise
            meta = page.get("metadata") or {}
            token = meta.get("continue") or ""
            yield page.get("items") or [], meta.get("resourceVersion", "")
            if not token:
                return

    async def watch(self, resource: ResourceType, resource_version: str
                    ) -> AsyncIterator[JSON]:
        """Watch events from ``resource_version`` until the server ends the
        watch, after a first ``CONNECTED`` once the server accepted it."""
        params = {"watch": "1", "resourceVersion": resource_version,
                  "allowWatchBookmarks": "true"}
        try:
            async with self._client.stream(collection(resource), params=params) as events:
                yield {"type": CONNECTED}
                async for event in events:
                    yield event
        except ConnectionFailed as err:
            raise MigrationError(f"{self.name} ({err.server}): {err.detail}") from err


def collection(resource: ResourceType, namespace: str = "") -> str:
    where = f"/namespaces/{namespace}" if namespace else ""
    return f"/apis/{resource.group}/{resource.version}{where}/{resource.plural}"


def item(resource: ResourceType, key: Key) -> str:
    return f"{collection(resource, key.namespace)}/{key.name}"


def apiservice_name(group: str, version: str) -> str:
    return f"{version}.{group}"


def discovery_path(apiservice: str) -> str:
    """Where kube-apiserver serves the group version of APIService ``apiservice``."""
    version, group = apiservice.split(".", 1)
    return f"/apis/{group}/{version}"


# -- which side serves a group -------------------------------------------------

async def served_by(cluster: Api, group: str, version: str) -> str | None:
    """``crds`` (a local APIService), ``service NS/NAME``, or None when the
    cluster does not serve the group/version at all."""
    try:
        found = await cluster.call("GET", f"{APISERVICES}/{apiservice_name(group, version)}")
    except APIError as err:
        if err.status == 404:
            return None
        raise MigrationError(f"reading the APIServices of {cluster.name}: {err.reason}"
                             ) from err
    service = (found.get("spec") or {}).get("service")
    return f"service {service.get('namespace')}/{service.get('name')}" if service else "crds"


def available(found: JSON) -> bool:
    return any(c.get("type") == "Available" and c.get("status") == "True"
               for c in (found.get("status") or {}).get("conditions") or [])


async def take_over(cluster: Api, apiservices: Sequence[JSON], say: Callable[[str], None],
                    *, timeout: float = 120) -> None:
    """Replace each group's APIService with one of ``apiservices``, dropping
    kube-apiserver's automanaged label (with it, kube-apiserver would put
    the CRDs' back), and wait until each is Available."""
    for wanted in apiservices:
        name = wanted["metadata"]["name"]
        while True:
            try:
                current: JSON | None = await cluster.call("GET", f"{APISERVICES}/{name}")
            except APIError as err:
                if err.status != 404:
                    raise MigrationError(f"APIService {name}: {err.reason}") from err
                current = None
            labels = {k: v for k, v in (wanted["metadata"].get("labels") or {}).items()
                      if k != AUTOMANAGED}
            body = {"apiVersion": "apiregistration.k8s.io/v1", "kind": "APIService",
                    "metadata": {"name": name, "labels": labels,
                                 "annotations": wanted["metadata"].get("annotations") or {}},
                    "spec": wanted["spec"]}
            try:
                if current is None:
                    await cluster.call("POST", APISERVICES, body)
                else:
                    body["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"]
                    await cluster.call("PUT", f"{APISERVICES}/{name}", body)
                break
            except APIError as err:
                if err.status != 409:  # kube-apiserver changed it meanwhile: again
                    raise MigrationError(f"APIService {name}: {err.reason}") from err
        say(f"APIService {name} now points at service"
            f" {wanted['spec']['service']['namespace']}/{wanted['spec']['service']['name']}")
    await _wait(cluster, [a["metadata"]["name"] for a in apiservices], local=False,
                timeout=timeout)


async def give_back(cluster: Api, names: Sequence[str], say: Callable[[str], None], *,
                    wait: Sequence[str], timeout: float = 120) -> None:
    """Delete the store's APIServices of ``names``; kube-apiserver registers
    the CRDs' own again. Waits until the CRDs serve each of ``wait``."""
    for name in names:
        found = await cluster.call("GET", f"{APISERVICES}/{name}")
        if (found.get("spec") or {}).get("service"):
            with contextlib.suppress(APIError):
                await cluster.call("DELETE", f"{APISERVICES}/{name}")
            say(f"APIService {name} removed: its CRDs serve it again")
    await _wait(cluster, wait, local=True, timeout=timeout)


async def _wait(cluster: Api, names: Sequence[str], *, local: bool, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    for name in names:
        while True:
            try:
                found = await cluster.call("GET", f"{APISERVICES}/{name}")
                is_local = not (found.get("spec") or {}).get("service")
                if is_local == local and available(found) and await _answered(cluster, name):
                    break
            except APIError as err:
                if err.status != 404:
                    raise MigrationError(f"APIService {name}: {err.reason}") from err
            if time.monotonic() > deadline:
                side = "the CRDs (are they applied?)" if local else "the store's frontend"
                raise MigrationError(f"APIService {name} is not Available from {side}"
                                     f" within {timeout:g} s")
            await asyncio.sleep(0.5)


async def _answered(cluster: Api, name: str) -> bool:
    """Whether kube-apiserver answers the group version of APIService
    ``name``. Its proxy learns the Available condition from an informer of
    its own, a moment after the condition shows; until then it answers 503."""
    try:
        await cluster.call("GET", discovery_path(name))
    except APIError:
        return False
    return True


def read_apiservices(text: str) -> list[JSON]:
    """The APIService documents of a manifest (the chart's)."""
    docs = [d for d in yaml.safe_load_all(text) if isinstance(d, dict)]
    found = [d for d in docs if d.get("kind") == "APIService"]
    wanted = {apiservice_name(g, v) for g, v in groups().items()}
    for doc in found:
        if not (doc.get("spec") or {}).get("service"):
            raise MigrationError(f"APIService {doc['metadata']['name']} names no service")
    names = {d["metadata"]["name"] for d in found}
    if names != wanted:
        raise MigrationError(f"the manifest must hold the APIServices {sorted(wanted)};"
                             f" it holds {sorted(names)}")
    return found


# -- the copy ------------------------------------------------------------------

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
