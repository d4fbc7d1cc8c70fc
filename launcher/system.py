"""``reports-pipeline up``: the whole system in one process tree.

One process owns embedded ClickHouse (chDB allows one per data directory), so
the committer, the materializer and the frontend share this process; the
aggregation agent (the Faust worker) is a child process that reaches ClickHouse
through it, and so is the embedded Apache Kafka. Against a Kafka cluster and a
ClickHouse server the same parts run, just connected elsewhere.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import fcntl
import hashlib
import json
import logging
import os
import signal
import socket
import ssl
import sys
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import IO, Any

import psutil
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import Route
from starlette.types import ASGIApp

from apiserver.access.authn import RequestHeaders
from apiserver.access.tls import ensure_certificate, ensure_token, serving_names, write_kubeconfig
from apiserver.http.app import Access, create_app
from apiserver.http.httpprotocol import protocol
from apiserver.http.instrumentation import metrics_page
from apiserver.storage.service import ReportService
from kubeclient import ConfigError, Target, target
from launcher.agentprocess import AgentProcess, AgentStartError
from launcher.broker.jars import BrokerError
from launcher.broker.singlenode import KafkaBroker
from launcher.delegation.frontproxy import ClusterError, front_proxy_ca, keep_trusting
from launcher.delegation.reviews import Reviews
from launcher.serving import freeze_startup
from pipeline.clickhouse.aggregates import AggregateWrites
from pipeline.clickhouse.analytics import AnalyticsQueries
from pipeline.clickhouse.changes import ChangeWrites
from pipeline.clickhouse.connection import Connection, StoreError, redacted
from pipeline.clickhouse.progress import ProgressReads
from pipeline.clickhouse.reads import ObjectReads
from pipeline.clickhouse.recovery import CommitterQueries
from pipeline.commit.service import CommitService
from pipeline.kafka import retries, topicadmin
from pipeline.kafka.fencing import FencedBrokers
from pipeline.kafka.published import Published
from pipeline.materialize.consumer import Materializer
from pipeline.observe import metrics
from pipeline.observe.lag import LagMonitor
from pipeline.runtime import memory
from pipeline.runtime.tasks import cancel
from pipeline.serving.changelog import ChangeLog
from pipeline.serving.writes import Writer
from pipeline.settings import Settings
from pipeline.worker import build_committer

log = logging.getLogger(__name__)

#: how long each part may take to stop before the others stop without it
STOP_SECONDS = 30.0


class AlreadyRunning(RuntimeError):
    pass


#: the public topics (the others are the pipeline's own)
PUBLIC_TOPICS = ("changes_topic", "result_events_topic", "summaries_topic")


@contextlib.contextmanager
def data_dir_lock(data_dir: Path, command: str = "up") -> Iterator[None]:
    """Hold ``data_dir`` for one process of ``command`` at a time."""
    try:
        # it holds the kubeconfig's token and the TLS key: the user's alone
        data_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        lock_file: IO[str] = open(data_dir / f"{command}.lock", "a+")  # noqa: SIM115
    except OSError as err:
        raise StartupError(f"cannot use --data-dir {data_dir}: {err.strerror}") from err
    try:
        try:
            fcntl.flock(lock_file, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError as err:
            lock_file.seek(0)
            pid = lock_file.read().strip() or "unknown"
            raise AlreadyRunning(f"reports-pipeline {command} is already running on {data_dir}"
                                 f" (pid {pid}); stop it first") from err
        lock_file.seek(0)
        lock_file.truncate()
        lock_file.write(str(os.getpid()))
        lock_file.flush()
        yield
    finally:
        lock_file.close()


class SignalFreeServer(uvicorn.Server):
    """uvicorn without its own signal handlers: the process that runs it owns them."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


@dataclass
class ServeOptions:
    """How a process runs: which parts, and how the frontend listens."""

    data_dir: Path
    worker: bool = True
    frontend: bool = True
    host: str = "127.0.0.1"
    port: int = 0
    tls_cert: Path | None = None  # None: a self-signed one under data_dir
    tls_key: Path | None = None
    cert_dir: Path | None = None  # None: DATA/tls
    client_ca: Path | None = None  # require client certificates signed by this CA
    write_kubeconfig: bool = True
    sock: socket.socket | None = None  # the listening socket, bound before start-up
    #: read the client CA (the aggregator's front-proxy CA) from the cluster
    front_proxy: Target | None = None
    #: plain-HTTP /livez and /readyz for the kubelet's probes (the HTTPS
    #: listener may require client certificates the kubelet does not have)
    health_sock: socket.socket | None = None
    #: the --requestheader-* flags (with client_ca or front_proxy)
    request_headers: RequestHeaders | None = None
    #: kubeconfig (or "in-cluster") for TokenReviews and SubjectAccessReviews
    authentication: str | None = None
    authorization: str | None = None


class StartupError(RuntimeError):
    """Something the user can fix stops the system from starting; the message
    says what."""


def listen(host: str, port: int) -> socket.socket:
    """The frontend's listening socket, bound before anything else starts so a
    port in use is reported at once."""
    try:
        return _listen(host, port)
    except socket.gaierror as err:
        raise StartupError(f"cannot listen on {host}: {err.strerror}; give --host an address"
                           " of this machine (127.0.0.1, 0.0.0.0)") from err
    except OSError as err:
        if err.errno == errno.EADDRINUSE:
            raise StartupError(f"cannot listen on {host}:{port}: the port is in use; give"
                               " another --port, or --port 0 for any free one") from err
        raise StartupError(f"cannot listen on {host}:{port}: {err.strerror}") from err


def _listen(host: str, port: int) -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(1024)
    sock.set_inheritable(True)
    return sock


KEEP_ALIVE_SECONDS = 90


def https_config(app: ASGIApp, *, cert: Path, key: Path, client_ca: Path | None,
                 settings: Settings | None = None) -> uvicorn.Config:
    """The frontend's HTTPS listener; with ``client_ca`` (the aggregator's
    front-proxy CA) every client must present a certificate it signed."""
    limits = settings or Settings()
    tls: dict[str, Any] = {"ssl_certfile": str(cert), "ssl_keyfile": str(key)}
    if client_ca is not None:
        # optional, as in k8s.io/apiserver: clients without one authenticate
        # with a bearer token instead
        tls.update(ssl_ca_certs=str(client_ca), ssl_cert_reqs=ssl.CERT_OPTIONAL)
    # proxy_headers off: the aggregator's identity comes in X-Remote-* headers
    # from a verified client certificate, and X-Forwarded-* means nothing here
    # idle connections are kept 90 s, as kube-apiserver keeps them (Go's
    # transports keep theirs as long): with uvicorn's 5 s a client reusing
    # one a moment too late met a closed connection
    return uvicorn.Config(app, log_level="warning", access_log=False, lifespan="off",
                          proxy_headers=False,
                          http=protocol(limits.max_url_bytes, limits.max_header_bytes),
                          timeout_keep_alive=KEEP_ALIVE_SECONDS,
                          timeout_graceful_shutdown=10, **tls)


class System:
    """The parts one process runs (the Faust worker, the frontend, or both),
    started in order and stopped in reverse; ``app`` is the frontend's ASGI
    application."""

    def __init__(self, settings: Settings, data_dir: Path, *, worker: bool = True,
                 frontend: bool = True, token: bool = True, access: Access | None = None):
        self.data_dir = data_dir.resolve()
        if not settings.instance_id:
            # One worker per data directory: its name is stable across restarts.
            digest = hashlib.sha1(str(self.data_dir).encode()).hexdigest()[:12]
            settings = replace(settings, instance_id=f"{socket.gethostname()}-{digest}")
        self.settings = settings
        self._roles = (worker, frontend, token)
        self._access = access
        self._stack = contextlib.AsyncExitStack()
        self.bootstrap = settings.kafka_bootstrap
        self.token = ""
        self.app: ASGIApp | None = None
        #: ClickHouse, and the parts of it each user is given
        self.clickhouse: Connection | None = None
        self.progress: ProgressReads | None = None
        self.reads: ObjectReads | None = None
        self.analytics: AnalyticsQueries | None = None
        self.aggregates: AggregateWrites | None = None
        self.broker: KafkaBroker | None = None
        self.committer: CommitService | None = None
        self.agent: AgentProcess | None = None
        self.changelog: ChangeLog | None = None

    async def start(self) -> None:
        retries.count_retries()
        try:
            await self._start()
        except BaseException:
            await self._stack.aclose()
            raise

    async def _start(self) -> None:
        settings, stack = self.settings, self._stack
        worker, frontend, token = self._roles
        self.data_dir.mkdir(parents=True, exist_ok=True)
        watch = asyncio.create_task(metrics.watch_event_loop(), name="event-loop-lag")
        self._on_stop("the event-loop sampler", lambda: cancel(watch))
        trim = asyncio.create_task(memory.trim_periodically(settings.malloc_trim_seconds,
                                                            metrics.MALLOC_TRIM_SECONDS.observe),
                                   name="malloc-trim")
        self._on_stop("the memory trimmer", lambda: cancel(trim))
        # ClickHouse first: it is the quicker to find unreachable
        self.clickhouse = clickhouse = Connection(settings, data_dir=self.data_dir)
        self._on_stop("ClickHouse", clickhouse.close)
        await clickhouse.start()
        self.progress = progress = ProgressReads(clickhouse)
        self.reads = reads = ObjectReads(clickhouse)
        self._on_stop("the reads of objects", reads.close)
        self.analytics = analytics = AnalyticsQueries(clickhouse)
        self._on_stop("the analytics queries", analytics.close)

        if not self.bootstrap:
            broker = KafkaBroker(self.data_dir / "kafka", heap=settings.kafka_heap,
                                 cache=Path(settings.kafka_cache) if settings.kafka_cache
                                 else None, progress=_progress)
            await broker.start()
            stack.push_async_callback(broker.stop)  # bounded: it kills what does not stop
            self.bootstrap = broker.bootstrap
            self.broker = broker
        replicated = await topicadmin.ensure_topics(settings, self.bootstrap)
        # before the clients writes wait on are made: each is tracked
        fenced = FencedBrokers(self.bootstrap)
        await fenced.start()
        self._on_stop("the fenced-broker watch", fenced.stop)
        # every part, Faust's topics included, replicates as the system's own
        self.settings = settings = replace(
            settings, replication_factor=replicated.factor,
            min_insync_replicas=replicated.min_insync)
        # what the committer publishes, its readers here take rather than parse
        published = Published()
        committer = None

        if worker:
            self.aggregates = AggregateWrites(clickhouse)
            self.agent = AgentProcess(settings, self.aggregates, bootstrap=self.bootstrap,
                                      data_dir=self.data_dir)
            await self.agent.start()
            self._on_stop("the aggregation agent", self.agent.stop)
            committer = build_committer(settings, CommitterQueries(clickhouse),
                                        bootstrap=self.bootstrap)
            self.committer = CommitService(settings, committer, bootstrap=self.bootstrap,
                                           published=published)
            await self.committer.start()
            self._on_stop("the committer", self.committer.stop)
            materializer = Materializer(settings, ChangeWrites(clickhouse),
                                        bootstrap=self.bootstrap, published=published)
            await materializer.start()
            self._on_stop("the materializer", materializer.stop)
            lag = LagMonitor(settings, progress, clickhouse=clickhouse, bootstrap=self.bootstrap)
            await lag.start()
            self._on_stop("the lag monitor", lag.stop)
        if not frontend:
            return
        self.changelog = changelog = ChangeLog(settings, progress, bootstrap=self.bootstrap,
                                               published=published)
        await changelog.start()
        self._on_stop("the change-log cache", changelog.stop)
        if committer is not None:  # keys it let go of: read here, not in ClickHouse
            committer.know(changelog.known)
        changelog.warm(reads.list_page)
        # the committer in this process, when there is one, takes writes directly
        writer = Writer(settings, bootstrap=self.bootstrap,
                        local=self.committer.submit if self.committer is not None else None)
        await writer.start()
        self._on_stop("the request writer", writer.stop)

        service = ReportService(store=reads, changelog=changelog, writer=writer)
        if token:
            self.token = ensure_token(self.data_dir / "tls")
        # without a token of its own, the frontend trusts the front-proxy's headers
        default = Access(request_headers=None if token else RequestHeaders())
        access = replace(self._access or default, token=self.token or None)
        self.app = create_app(service, settings, store=analytics, access=access)

    async def stop(self) -> None:
        await self._stack.aclose()

    def _on_stop(self, part: str, stop: Callable[[], Awaitable[object]]) -> None:
        """Stop ``part`` with the rest, in reverse order; one that does not stop
        within ``STOP_SECONDS`` is logged and left behind so the others still
        stop (a hung consumer must not keep the broker and ClickHouse open)."""
        async def bounded() -> None:
            try:
                async with asyncio.timeout(STOP_SECONDS):
                    await stop()
            except TimeoutError:
                log.error("%s did not stop within %g s; stopping the rest", part, STOP_SECONDS)
        self._stack.push_async_callback(bounded)


async def run(settings: Settings, options: ServeOptions) -> None:
    """Run until SIGINT or SIGTERM, then stop everything."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    trusted = options.client_ca is not None or options.front_proxy is not None
    reviews = {}
    try:
        for role in ("authentication", "authorization"):
            source = getattr(options, role)
            if source:
                reviews[role] = Reviews(await target(source),
                                        token_ttl=settings.authz_cache_seconds)
    except ConfigError as err:
        raise StartupError(str(err)) from err
    access = Access(
        request_headers=(options.request_headers or RequestHeaders()) if trusted else None,
        review_token=reviews["authentication"].token if "authentication" in reviews else None,
        review_access=reviews["authorization"].access if "authorization" in reviews else None,
        cache_seconds=settings.authz_cache_seconds)
    system = System(settings, options.data_dir, worker=options.worker,
                    frontend=options.frontend, token=options.write_kubeconfig or not trusted,
                    access=access)
    health = Health()
    probes = None
    if options.health_sock is not None:
        probes = SignalFreeServer(uvicorn.Config(health.app(), log_level="warning",
                                                 access_log=False, lifespan="off"))
        health.task = asyncio.create_task(probes.serve(sockets=[options.health_sock]),
                                          name="health")
    whole = options.worker and options.frontend  # `up`, which can run its own
    try:
        await system.start()
    except topicadmin.Unreachable as err:
        raise StartupError(f"{err}; check KAFKA_BOOTSTRAP" + (
            " (unset it and `up` runs its own broker)" if whole else "")) from err
    except StoreError as err:
        raise StartupError(f"{err}; check CLICKHOUSE_URL" + (
            " (unset it and `up` uses the embedded chDB)" if whole else "")) from err
    except (BrokerError, AgentStartError) as err:
        raise StartupError(str(err)) from err
    freeze_startup()
    try:
        waiter = asyncio.create_task(stop.wait(), name="stop-signal")
        if system.app is None:
            health.ready = True
            print("reports-pipeline worker is running", flush=True)
            await waiter
        else:
            await _serve(system, options, waiter, health)
        health.ready = False
        print("reports-pipeline is stopping", file=sys.stderr, flush=True)
    finally:
        await system.stop()
        for review in reviews.values():
            await review.close()
        if probes is not None and health.task is not None:
            probes.should_exit = True
            await health.task


class Health:
    """The kubelet's view: live while the process runs, ready while it serves
    (so the Service, and the APIServices behind it, send it traffic only then)."""

    def __init__(self) -> None:
        self.ready = False
        self.task: asyncio.Task[None] | None = None

    def app(self) -> ASGIApp:
        async def livez(request: Request) -> Response:
            return PlainTextResponse("ok")

        async def readyz(request: Request) -> Response:
            if self.ready:
                return PlainTextResponse("ok")
            return PlainTextResponse("not ready", status_code=503)

        return Starlette(routes=[Route("/livez", livez), Route("/healthz", livez),
                                 Route("/readyz", readyz), Route("/metrics", metrics_page)])


async def _serve(system: System, options: ServeOptions, waiter: asyncio.Task[bool],
                 health: Health) -> None:
    assert system.app is not None
    cert, key = options.tls_cert, options.tls_key
    if cert is None or key is None:
        cert, key = ensure_certificate(options.cert_dir or system.data_dir / "tls",
                                       serving_names(options.host, interfaces=_addresses(),
                                                     hostname=socket.gethostname()))
    client_ca, front_proxy_pem = options.client_ca, ""
    if options.front_proxy is not None:
        try:
            front_proxy_pem = await front_proxy_ca(options.front_proxy)
        except ClusterError as err:
            raise StartupError(str(err)) from err
        client_ca = system.data_dir / "front-proxy-ca.crt"
        client_ca.write_text(front_proxy_pem)
    sock = options.sock or listen(options.host, options.port)
    port = sock.getsockname()[1]
    server = SignalFreeServer(https_config(system.app, cert=cert, key=key, client_ca=client_ca,
                                  settings=system.settings))
    serving = asyncio.create_task(server.serve(sockets=[sock]), name="http")
    refreshing = None
    try:
        while not server.started:
            if serving.done():
                await serving
                raise RuntimeError("the HTTP server did not start")
            await asyncio.sleep(0.01)
        if options.front_proxy is not None and server.config.ssl is not None:
            refreshing = asyncio.create_task(keep_trusting(
                options.front_proxy, server.config.ssl, front_proxy_pem), name="front-proxy-ca")
        health.ready = True
        local = "127.0.0.1" if options.host in ("0.0.0.0", "") else options.host
        frontend = f"https://{local}:{port}"
        if options.write_kubeconfig:
            kubeconfig = system.data_dir / "kubeconfig"
            write_kubeconfig(kubeconfig, server=frontend, cert_file=cert, token=system.token)
            endpoints = write_endpoints(system, frontend=frontend, kubeconfig=kubeconfig)
            print(ready_text(endpoints), flush=True)
        else:
            probes = ""
            if options.health_sock is not None:
                probes = f" (probes: http://{local}:{options.health_sock.getsockname()[1]}/readyz)"
            print(f"reports-pipeline frontend is serving on {frontend}{probes}", flush=True)
        await asyncio.wait({waiter, serving}, return_when=asyncio.FIRST_COMPLETED)
        waiter.cancel()
    finally:
        health.ready = False
        if refreshing is not None:
            refreshing.cancel()
        if system.changelog is not None:
            # open watches end cleanly, so their connections close at once
            system.changelog.close_watches()
        server.should_exit = True
        await serving


def _addresses() -> list[str]:
    """Every address of this machine's interfaces (a server on 0.0.0.0 is
    reached by any of them)."""
    return [a.address.split("%")[0] for addrs in psutil.net_if_addrs().values()
            for a in addrs if a.family in (socket.AF_INET, socket.AF_INET6)]


def write_endpoints(system: System, *, frontend: str, kubeconfig: Path) -> dict[str, Any]:
    """``DATA/endpoints.json``: where a running ``up`` answers, for tools and
    the examples (``--data-dir``)."""
    settings = system.settings
    endpoints = {
        "kubeconfig": str(kubeconfig),
        "frontend": frontend,
        "analytics": f"{frontend}/analytics/v1/query",
        "kafka_bootstrap": system.bootstrap,
        "topics": {name.removesuffix("_topic").replace("_", "-"): getattr(settings, name)
                   for name in PUBLIC_TOPICS},
        "clickhouse": redacted(settings.clickhouse_url) if settings.clickhouse_url
        else f"embedded chDB in {system.data_dir / 'clickhouse'}",
        "database": settings.database,
        "cluster": settings.cluster,
        "pid": os.getpid(),
    }
    path = system.data_dir / "endpoints.json"
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(endpoints, indent=2) + "\n")
    tmp.replace(path)
    return endpoints


def ready_text(endpoints: dict[str, Any]) -> str:
    topics = ", ".join(endpoints["topics"].values())
    return "\n".join([
        "reports-pipeline is ready",
        f"  kubectl:    kubectl --kubeconfig {endpoints['kubeconfig']} get polr -A",
        f"  frontend:   {endpoints['frontend']}",
        f"  kafka:      {endpoints['kafka_bootstrap']} (public topics: {topics})",
        f"  analytics:  kubectl --kubeconfig {endpoints['kubeconfig']} create --raw"
        " /analytics/v1/query -f query.json",
        "              (query.json: {\"query\": \"SELECT ...\"}; or POST to"
        f" {endpoints['analytics']})",
        f"  clickhouse: {endpoints['clickhouse']}",
        "Stop with Ctrl-C (SIGTERM).",
    ])


def _progress(message: str) -> None:
    print(f"reports-pipeline: {message}", file=sys.stderr, flush=True)
