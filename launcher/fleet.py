"""``reports-pipeline fleet``: several clusters' public topics followed into one
analytics store (embedded chDB under ``DATA/clickhouse``, or CLICKHOUSE_URL),
served read-only as ``up`` serves its own (``/analytics/v1/query``, with a
kubeconfig in ``DATA``), with each source's state at ``/fleet/v1/sources``.

The sources are the ``--source`` flags and the ``clusters`` of ``--config``,
whose file is read again when it changes: a cluster added there is followed
from then on, one removed is no longer followed (its rows stay).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import socket
from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path

import orjson
from aiokafka import TopicPartition
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from apiserver.access.tls import ensure_certificate, ensure_token, serving_names, write_kubeconfig
from apiserver.http.app import create_analytics_app
from kubeclient import Target
from launcher.migrate.api import Api
from launcher.migrate.objects import key_of
from launcher.system import (
    SignalFreeServer,
    StartupError,
    data_dir_lock,
    https_config,
    listen,
)
from pipeline.clickhouse import fleetrows
from pipeline.clickhouse.analytics import AnalyticsQueries
from pipeline.clickhouse.connection import Connection, StoreError
from pipeline.clickhouse.fleet import FleetStore, SourceState
from pipeline.fleet import sources as fleet_sources
from pipeline.fleet.follower import CONTACT_SECONDS, Follower
from pipeline.fleet.sources import Source, SourceError
from pipeline.fleet.writer import Writer
from pipeline.kafka import clientconfig, retries
from pipeline.model.resources import RESOURCES
from pipeline.observe import metrics
from pipeline.settings import Settings

log = logging.getLogger(__name__)

#: how often the config file is looked at for changes
RELOAD_SECONDS = 2.0


@dataclass
class FleetOptions:
    data_dir: Path
    sources: Sequence[Source] = ()
    config: Path | None = None
    host: str = "127.0.0.1"
    port: int = 0


class Fleet:
    """The followers of every source, over one store."""

    def __init__(self, settings: Settings, options: FleetOptions):
        self.settings = settings
        self.options = options
        self.connection = Connection(settings, data_dir=options.data_dir)
        self.store = FleetStore(self.connection)
        self.writer = Writer(self.store)
        self.analytics = AnalyticsQueries(self.connection)
        self.followers: dict[str, Follower] = {}
        self._config_seen: tuple[float, int] | None = None
        self._reloading: asyncio.Task[None] | None = None
        self._recording: asyncio.Task[None] | None = None
        self._stopping: set[asyncio.Task[None]] = set()

    def wanted(self) -> list[Source]:
        """The flags' sources and the config file's (SourceError if either is wrong)."""
        from_file: list[Source] = []
        if self.options.config is not None:
            try:
                text = self.options.config.read_text()
            except OSError as err:
                raise SourceError(f"{self.options.config}: {err.strerror}") from err
            from_file = fleet_sources.from_config(text, str(self.options.config))
        return fleet_sources.combined(self.options.sources, from_file)

    async def start(self) -> None:
        # a source that is down is its state, not a log line per retry of its
        # consumer: aiokafka's retries counted, told once a minute
        retries.count_retries()
        await self.connection.start()
        self.writer.start()
        self.follow(self.wanted())
        self._recording = asyncio.create_task(self._record(), name="fleet states")
        if self.options.config is not None:
            self._reloading = asyncio.create_task(self._reload(), name="fleet config")

    async def _record(self) -> None:
        """Every follower's state and contact, together, every CONTACT_SECONDS."""
        while True:
            await asyncio.sleep(CONTACT_SECONDS)
            try:
                await self.store.record_states(
                    [f.snapshot() for f in self.followers.values()])
            except StoreError as err:
                log.warning("cannot record the clusters' states: %s", err)

    def follow(self, wanted: Sequence[Source]) -> None:
        current = [f.source for f in self.followers.values()]
        start, stop = fleet_sources.changed(current, wanted)
        for s in stop:
            follower = self.followers.pop(s.name)
            stopping = asyncio.create_task(follower.stop(), name=f"stop {s.name}")
            self._stopping.add(stopping)
            stopping.add_done_callback(self._stopping.discard)
            log.warning("cluster %s is no longer followed (its rows stay)", s.name)
        for s in start:
            follower = self.followers[s.name] = Follower(s, self.store, self.writer)
            follower.start()

    async def _reload(self) -> None:
        assert self.options.config is not None
        while True:
            await asyncio.sleep(RELOAD_SECONDS)
            try:
                st = self.options.config.stat()
                seen = (st.st_mtime, st.st_size)
            except OSError:
                seen = None
            if seen == self._config_seen:
                continue
            self._config_seen = seen
            try:
                self.follow(self.wanted())
            except SourceError as err:
                log.error("%s; following the clusters as before", err)

    async def states(self) -> list[SourceState]:
        """Every source the store knows, as this process sees it now: one it
        follows is unreachable when its Kafka has not answered lately."""
        recorded = {s.cluster: s for s in await self.store.states()}
        for name, follower in self.followers.items():
            seen = recorded.get(name)
            recorded[name] = replace(follower.snapshot(),
                                     last_change=seen.last_change if seen else None)
        return sorted(recorded.values(), key=lambda s: s.cluster)

    async def stop(self) -> None:
        for task in (self._reloading, self._recording):
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        await asyncio.gather(*(f.stop() for f in self.followers.values()), *self._stopping)
        await self.writer.stop()
        await self.analytics.close()
        await self.connection.close()


def states_json(states: Sequence[SourceState]) -> bytes:
    return orjson.dumps({"clusters": [
        {"cluster": s.cluster, "bootstrap": s.bootstrap, "prefix": s.prefix,
         "state": s.state, "detail": s.detail, "lastContact": s.last_contact.isoformat(),
         "lastChange": s.last_change.isoformat() if s.last_change else None}
        for s in states]})


async def run_fleet(settings: Settings, options: FleetOptions) -> None:
    """Follow the sources and serve the store until SIGINT or SIGTERM."""
    with data_dir_lock(options.data_dir, "fleet"):
        sock = listen(options.host, options.port)  # a port in use is told before anything
        fleet = Fleet(settings, options)
        try:
            await fleet.start()
        except StoreError as err:
            raise StartupError(str(err)) from err

        async def sources_page(request: Request) -> Response:
            return Response(states_json(await fleet.states()), media_type="application/json")

        token = ensure_token(options.data_dir / "tls")
        cert, key = ensure_certificate(options.data_dir / "tls",
                                       serving_names(options.host,
                                                     hostname=socket.gethostname()))
        async def metrics_page(request: Request) -> Response:
            body, content_type = metrics.exposition(metrics.FLEET_REGISTRY)
            return Response(body, headers={"Content-Type": content_type})

        app = create_analytics_app(fleet.analytics, token=token, metrics=metrics_page,
                                   routes=[Route("/fleet/v1/sources", sources_page)])
        server = SignalFreeServer(https_config(app, cert=cert, key=key, client_ca=None,
                                               settings=settings))
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, lambda: setattr(server, "should_exit", True))
        serving = asyncio.create_task(server.serve(sockets=[sock]), name="http")
        try:
            while not server.started:
                if serving.done():
                    await serving
                    raise StartupError("the analytics endpoint did not start")
                await asyncio.sleep(0.01)
            local = "127.0.0.1" if options.host in ("0.0.0.0", "") else options.host
            url = f"https://{local}:{sock.getsockname()[1]}"
            kubeconfig = options.data_dir / "kubeconfig"
            write_kubeconfig(kubeconfig, server=url, cert_file=cert, token=token)
            names = ", ".join(fleet.followers) or "none yet"
            print("\n".join([
                f"reports-pipeline fleet is ready, following: {names}",
                f"  sources:    kubectl --kubeconfig {kubeconfig} get --raw /fleet/v1/sources",
                f"  analytics:  kubectl --kubeconfig {kubeconfig} create --raw"
                " /analytics/v1/query -f query.json",
                f"  trends:     reports-pipeline trends --data-dir {options.data_dir} --by cluster",
                "Stop with Ctrl-C (SIGTERM)."]), flush=True)
            await serving
        finally:
            server.should_exit = True
            with contextlib.suppress(asyncio.CancelledError):
                await serving
            await fleet.stop()


@dataclass(frozen=True)
class Resynced:
    reports: int
    forgotten: int
    version: int
    log_start: int


async def resync(settings: Settings, data_dir: Path, source: Source, cluster_api: Target
                 ) -> Resynced:
    """Bring ``source``'s rows back to what its cluster holds, from its API
    (every report of every kind, listed page by page), and follow its change
    log again from the oldest record it still holds: what the list missed
    comes from there (a record taken again collapses into its row). The
    fleet must not be running on ``data_dir`` meanwhile."""
    connection = Connection(settings, data_dir=data_dir)
    store = FleetStore(connection)
    try:
        await connection.start()
        listed_at = datetime.now(UTC)
        batch = fleetrows.Batch()
        keep: set[tuple[str, str, str]] = set()
        version = 0
        async with Api(cluster_api, f"cluster {source.name}") as api:
            for resource in RESOURCES:
                async for items, rv in api.pages(resource, PAGE):
                    fleetrows.listed(source.name, items, listed_at, batch)
                    keep.update((k.resource, k.namespace, k.name)
                                for k in (key_of(resource, obj) for obj in items))
                    version = max(version, int(rv or 0))
                if len(batch) > FLUSH_ROWS:
                    await store.write(batch)
                    batch = fleetrows.Batch()
        await store.write(batch)
        forgotten = await store.forget(source.name, keep, version)
        start = await log_start(source)
        await store.set_positions(source.name, {(source.changes_topic, 0): start - 1})
        return Resynced(len(keep), forgotten, version, start)
    finally:
        await connection.close()


#: a resync's page of a list, and how many rows it writes at once
PAGE = 500
FLUSH_ROWS = 50_000


async def log_start(source: Source) -> int:
    """The oldest offset ``source``'s change log holds."""
    consumer = clientconfig.consumer(source.bootstrap,
                                     request_timeout_ms=clientconfig.QUICK_REQUEST_TIMEOUT_MS)
    tp = TopicPartition(source.changes_topic, 0)
    try:
        await consumer.start()
        return int((await consumer.beginning_offsets([tp]))[tp])
    finally:
        await consumer.stop()
