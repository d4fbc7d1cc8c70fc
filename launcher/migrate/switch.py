"""Which side serves a report group in the cluster: its APIService, a local
one (the CRDs) or one pointing at the store's frontend Service. Taking the
groups over, giving them back, and waiting until kube-apiserver answers."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable, Sequence

import yaml

from kubeclient import APIError
from launcher.migrate.api import Api, MigrationError
from launcher.migrate.objects import JSON
from pipeline.model.resources import groups

APISERVICES = "/apis/apiregistration.k8s.io/v1/apiservices"
#: the label kube-apiserver puts on the APIServices it registers for CRDs
#: (and keeps in sync while it is there)
AUTOMANAGED = "kube-aggregator.kubernetes.io/automanaged"


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
