"""The ``reports-pipeline`` command: parses its line (``launcher.parser``) and
runs the command it names, wiring that command's process."""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import secrets
import sys
from typing import Any

from aiokafka.errors import KafkaError

from apiserver.access.authn import RequestHeaders
from kubeclient import ConfigError, target
from launcher import commands, demo
from launcher.broker.jars import BrokerError
from launcher.dashboard import serve_dashboard
from launcher.delegation.frontproxy import ClusterError, cluster_from_env
from launcher.fleet import Fleet, FleetOptions, Resynced, resync, run_fleet
from launcher.migrate import api, transfer
from launcher.migrate.switch import read_apiservices
from launcher.parser import build_parser
from launcher.serving import serve
from launcher.system import (
    AlreadyRunning,
    ServeOptions,
    StartupError,
    data_dir_lock,
    listen,
    run,
)
from launcher.trends import (
    Analytics,
    RunningSystem,
    ServerAnalytics,
    TrendQuery,
    run_trends,
)
from pipeline.clickhouse.connection import StoreError
from pipeline.fleet.sources import Source, SourceError
from pipeline.runtime import memory
from pipeline.settings import Settings


def _tls_options(parser: argparse.ArgumentParser, args: argparse.Namespace) -> dict[str, Any]:
    if (args.tls_cert is None) != (args.tls_key is None):
        parser.exit(2, f"reports-pipeline {args.command}: error: give both --tls-cert-file and"
                       " --tls-private-key-file, or neither\n")
    return {"tls_cert": args.tls_cert, "tls_key": args.tls_key, "cert_dir": args.cert_dir}


def _access_options(args: argparse.Namespace) -> dict[str, Any]:
    return {"client_ca": args.client_ca,
            "request_headers": RequestHeaders(
                args.requestheader_username_headers, args.requestheader_group_headers,
                args.requestheader_extra_headers_prefix, args.requestheader_allowed_names,
                args.requestheader_uid_headers),
            "authentication": args.authentication_kubeconfig,
            "authorization": args.authorization_kubeconfig}


def _trends(args: argparse.Namespace, settings: Settings) -> int:
    try:
        if args.by == "cluster" and args.namespace:
            raise ValueError("--by cluster counts every namespace: drop --namespace")
        cluster = args.cluster if args.cluster is not None else (
            "" if args.by == "cluster" else settings.cluster)
        query = TrendQuery(cluster, args.window, args.since, args.namespace, args.policy,
                           by=args.by)
        if args.chart is not None and args.chart.suffix.lower() not in (".png", ".svg"):
            raise ValueError("--chart must name a .png or .svg file")
        source: Analytics
        if args.data_dir is not None:
            source = RunningSystem(args.data_dir)
        elif settings.clickhouse_url:
            source = ServerAnalytics(settings)
        else:
            raise ValueError("give --data-dir of a running `up`, or set CLICKHOUSE_URL")
        print(asyncio.run(run_trends(source, query, chart=args.chart, top=args.top,
                                     rank=args.rank)))
    except (ValueError, OSError, RuntimeError) as err:
        print(f"reports-pipeline trends: {err}", file=sys.stderr)
        return 1
    if args.chart is not None:
        print(f"chart written to {args.chart}")
    return 0


def _dashboard(args: argparse.Namespace, settings: Settings) -> int:
    source: Analytics
    try:
        if args.data_dir is not None:
            running = RunningSystem(args.data_dir)
            source, token = running, running.token
        elif settings.clickhouse_url:
            source = ServerAnalytics(settings, threads=4)
            token = os.environ.get("REPORTS_DASHBOARD_TOKEN") or secrets.token_urlsafe(24)
        else:
            raise ValueError("give --data-dir of a running `up`, or set CLICKHOUSE_URL")
        sock = listen(args.host, args.port)
    except (ValueError, OSError, RuntimeError) as err:
        print(f"reports-pipeline dashboard: {err}", file=sys.stderr)
        return 1

    async def checked() -> None:
        # what it reads answers before its address is given out
        try:
            await source.check()
        except BaseException:
            await source.aclose()
            raise
        host, bound = sock.getsockname()[:2]
        shown = "127.0.0.1" if host in ("0.0.0.0", "::") else host
        print(f"Dashboard: http://{shown}:{bound}/?token={token}", flush=True)
        print("Stop with Ctrl-C (SIGTERM).", flush=True)
        await serve_dashboard(source, sock, token=token)
    try:
        serve(checked())
    except (ValueError, OSError, RuntimeError) as err:
        print(f"reports-pipeline dashboard: {err}", file=sys.stderr)
        return 1
    return 0


def _migrate(args: argparse.Namespace) -> int:
    name = f"reports-pipeline migrate {args.direction}"
    try:
        store_config = args.store or args.data_dir / "kubeconfig"
        if not store_config.exists():
            raise ValueError(f"{store_config} does not exist" + (
                "" if args.store else f": is `reports-pipeline up --data-dir {args.data_dir}`"
                                      " running?"))
        switch = None
        if args.direction == "in" and args.switch is not None:
            switch = read_apiservices(args.switch.read_text())
        plan = transfer.Plan(args.direction, page_size=args.page_size,
                             concurrency=args.concurrency, existing=args.existing,
                             switch=switch, switch_back=getattr(args, "switch_back", False),
                             settle=getattr(args, "settle", 5.0))

        async def run_it() -> Any:
            cluster, store = await target(args.kubeconfig), await target(store_config)
            async with api.Api(cluster, "the cluster") as c, \
                    api.Api(store, "the store") as s:
                return await transfer.migrate(plan, cluster=c, store=s,
                                              say=lambda line: print(line, file=sys.stderr,
                                                                     flush=True))
        tally = asyncio.run(run_it())
    except (ConfigError, api.MigrationError, OSError, ValueError) as err:
        print(f"{name}: {err}", file=sys.stderr)
        return 1
    print("\n".join(tally.lines(transfer.RESOURCES)))
    failed = tally.total(transfer.FAILED)
    if failed:
        print(f"{name}: {failed} objects failed", file=sys.stderr)
    return 1 if failed or tally.notes else 0


def _say(message: str) -> None:
    print(message, flush=True)


def _fleet(args: argparse.Namespace, settings: Settings) -> int:
    options = FleetOptions(args.data_dir, sources=args.source, config=args.config,
                           host=args.host, port=args.port)
    if not options.sources and options.config is None:
        print("reports-pipeline fleet: give the clusters to follow (--source or --config)",
              file=sys.stderr)
        return 2
    try:
        if args.resync is None:
            serve(run_fleet(settings, options))
            return 0
        if args.kubeconfig is None:
            raise SourceError("--resync needs the cluster's --kubeconfig")
        found = [s for s in Fleet(settings, options).wanted() if s.name == args.resync]
        if not found:
            raise SourceError(f"cluster {args.resync} is not among the sources given")
        with data_dir_lock(args.data_dir, "fleet"):
            done = asyncio.run(_resync(settings, args, found[0]))
        print(f"cluster {args.resync}: {done.reports} reports listed at resourceVersion"
              f" {done.version}, {done.forgotten} gone since; its change log is followed"
              f" again from offset {done.log_start}", flush=True)
        return 0
    except (StartupError, AlreadyRunning, SourceError, ConfigError, api.MigrationError,
            StoreError, KafkaError) as err:
        print(f"reports-pipeline fleet: {err}", file=sys.stderr)
        return 1


async def _resync(settings: Settings, args: argparse.Namespace, source: Source) -> Resynced:
    return await resync(settings, args.data_dir, source, await target(args.kubeconfig))


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(level=args.log_level.upper(),
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        settings = Settings.from_env()
    except ValueError as err:
        print(f"reports-pipeline: {err}", file=sys.stderr)
        return 2
    if args.command == "trends":
        return _trends(args, settings)
    extra: commands.Command | None = getattr(args, "extra_command", None)
    if extra is not None:
        return extra.run(args)
    if args.command == "dashboard":
        return _dashboard(args, settings)
    if args.command == "migrate":
        return _migrate(args)
    if args.command == "fleet":
        return _fleet(args, settings)
    if args.command not in ("up", "demo") and not (settings.kafka_bootstrap
                                                    and settings.clickhouse_url):
        parser.exit(2, f"reports-pipeline {args.command}: needs KAFKA_BOOTSTRAP and"
                       " CLICKHOUSE_URL (use `up` for the embedded defaults)\n")
    memory.limit_arenas(settings.malloc_arenas)  # before any thread allocates
    try:
        if args.command == "worker":
            health = None if args.health_port is None else listen("0.0.0.0", args.health_port)
            serve(run(settings, ServeOptions(args.data_dir, frontend=False,
                                             health_sock=health)))
            return 0
        # the port first: a port in use is reported before anything starts
        sock = listen(args.host, args.port)
        if args.command == "serve":
            options = ServeOptions(
                args.data_dir, worker=False, host=args.host, sock=sock,
                write_kubeconfig=False, **_tls_options(parser, args),
                **_access_options(args),
                front_proxy=cluster_from_env(os.environ)
                if args.front_proxy_ca_from_cluster else None,
                health_sock=None if args.health_port is None
                else listen(args.host, args.health_port))
            serve(run(settings, options))
            return 0
        with data_dir_lock(args.data_dir):
            if args.command == "demo":
                written = asyncio.run(demo.write(settings, args.data_dir, days=args.days,
                                                 seed=args.seed, progress=_say))
                _say(f"history written: {written.changes} changes from"
                     f" {written.first:%Y-%m-%d %H:%M} to {written.last:%Y-%m-%d %H:%M} UTC;"
                     f" {written.reports} PolicyReports now, {written.failing} failing"
                     " results")
                serve(run(settings, ServeOptions(args.data_dir, host=args.host, sock=sock)))
                return 0
            serve(run(settings, ServeOptions(args.data_dir, host=args.host, sock=sock,
                                             **_tls_options(parser, args),
                                             **_access_options(args))))
        return 0
    except (StartupError, AlreadyRunning, ClusterError, demo.DemoError, BrokerError) as err:
        print(f"reports-pipeline {args.command}: {err}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
