"""One Kubernetes API as the migration reaches it (``kubeclient``): calls,
paged lists and watches of the report resources, and their paths."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

from kubeclient import APIGoneError, Client, ConnectionFailed, Target
from launcher.migrate.objects import JSON, Key
from pipeline.model.resources import ResourceType

REQUEST_SECONDS = 60.0
MANAGER = "reports-pipeline-migrate"
#: the event ``Api.watch`` yields first, once the server accepted the watch
CONNECTED = "CONNECTED"


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

