"""Kubernetes policy reports kept in Kafka and ClickHouse instead of etcd, served
to kubectl and every Kubernetes client through the aggregation layer.

commands:
  up      the whole system on this machine (a single-node Apache Kafka and
          embedded ClickHouse unless KAFKA_BOOTSTRAP and CLICKHOUSE_URL are set)
  worker  only the committer and the Faust agents (production: scaled on their own)
  serve   only the frontend (production: behind the kube-apiserver aggregator)
  trends  failing results per namespace and policy over time, as a table and a chart
  dashboard  the trends as web pages
  demo    `up` on a fresh data directory given weeks of Kyverno-shaped history
  bench   the benchmark: Kyverno-shaped traffic against a fresh `up`, and the
          analytics questions against a PostgreSQL JSONB baseline

`reports-pipeline COMMAND --help` explains each.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import secrets
import sys
import textwrap
from pathlib import Path
from typing import Any

from apiserver.authn import RequestHeaders
from kubeclient import ConfigError, target
from launcher import commands, demo
from launcher.broker.singlenode import BrokerError
from launcher.dashboard import serve_dashboard
from launcher.delegation.frontproxy import ClusterError, cluster_from_env
from launcher.migrate import transfer
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
    parse_duration,
    run_trends,
)
from pipeline.runtime import memory
from pipeline.settings import Settings

LOG_LEVELS = ("debug", "info", "warning", "error", "critical")

#: the environment each command reads (README "Configuration" has them all)
ENV_UP = """environment:
  KAFKA_BOOTSTRAP   a Kafka cluster's bootstrap servers (default: run a
                    single-node Apache Kafka under DATA/kafka; needs Java 17
                    and, on first use, Maven to fetch its jars)
  CLICKHOUSE_URL    a ClickHouse server, http(s)://user:password@host:port
                    (default: embedded chDB under DATA/clickhouse)
  REPORTS_CLUSTER, REPORTS_DATABASE, REPORTS_TOPIC_PREFIX and the other
  REPORTS_* settings: see README.md, "Configuration"."""
ENV_SERVER = """environment (both required):
  KAFKA_BOOTSTRAP   the Kafka cluster's bootstrap servers
  CLICKHOUSE_URL    the ClickHouse server, http(s)://user:password@host:port
  REPORTS_CLUSTER, REPORTS_DATABASE, REPORTS_TOPIC_PREFIX and the other
  REPORTS_* settings: see README.md, "Configuration"."""
ENV_TRENDS = """environment:
  CLICKHOUSE_URL    the ClickHouse server to query when no --data-dir is given
  REPORTS_CLUSTER   the cluster whose reports are counted (default: default)
  REPORTS_DATABASE  the ClickHouse database (default: reports)"""


ENV_DASHBOARD = """environment:
  CLICKHOUSE_URL           the ClickHouse server to read when no --data-dir is given
  REPORTS_DATABASE         the ClickHouse database (default: reports)
  REPORTS_DASHBOARD_TOKEN  the token a browser must present when reading CLICKHOUSE_URL
                           (default: a random one, printed in the URL)"""


class _Help(argparse.RawDescriptionHelpFormatter, argparse.ArgumentDefaultsHelpFormatter):
    """Descriptions as written, and each option's default where it has one."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        if action.default is None or action.default is False or action.required:
            return action.help
        return super()._get_help_string(action)


def _about(text: str) -> str:
    """A command's description, wrapped as help text is."""
    return textwrap.fill(text, width=79)


def _whole(text: str, what: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not {what}") from None


def port(text: str) -> int:
    value = _whole(text, "a port number")
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"{value} is not a port number (0 to 65535;"
                                         " 0 picks any free one)")
    return value


def duration(text: str) -> int:
    try:
        seconds = parse_duration(text)
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err)) from None
    if seconds <= 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not longer than nothing; give e.g."
                                         " 1m, 1h or 1d")
    return seconds


def positive(text: str) -> int:
    value = _whole(text, "a whole number")
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} is less than 1")
    return value


def existing_file(text: str) -> Path:
    path = Path(text)
    if not path.is_file():
        raise argparse.ArgumentTypeError(f"{text} is not a file")
    return path


def _access_flags(command: argparse.ArgumentParser, *, serve: bool) -> None:
    """The delegated authentication and authorization flags of servers built on
    k8s.io/apiserver, so the aggregator's path runs locally too."""
    group = command.add_argument_group(
        "authentication and authorization (as k8s.io/apiserver servers)")
    trust = group.add_mutually_exclusive_group()
    names = ["--requestheader-client-ca-file"] + (["--client-ca"] if serve else [])
    trust.add_argument(*names, dest="client_ca", type=existing_file,
                       help="trust the user named in request headers from clients with a"
                            " certificate this CA signed (the aggregator's front-proxy CA)")
    if serve:
        trust.add_argument("--front-proxy-ca-from-cluster", action="store_true",
                           help="in a pod: read that CA from kube-system/"
                                "extension-apiserver-authentication with the pod's service"
                                " account, and keep reading it")
    group.add_argument("--requestheader-allowed-names", type=_names, metavar="NAMES", default="",
                       help="common names the front-proxy client certificate may have,"
                            " comma-separated (empty: any)")
    group.add_argument("--requestheader-username-headers", type=_names, metavar="NAMES",
                       default="X-Remote-User", help="headers naming the user")
    group.add_argument("--requestheader-group-headers", type=_names, metavar="NAMES",
                       default="X-Remote-Group", help="headers naming the user's groups")
    group.add_argument("--requestheader-extra-headers-prefix", type=_names, metavar="NAMES",
                       default="X-Remote-Extra-", help="prefixes of headers with the"
                       " user's extra attributes")
    group.add_argument("--requestheader-uid-headers", type=_names, metavar="NAMES", default="",
                       help="headers naming the user's uid (the aggregator sends"
                            " X-Remote-Uid; empty: no uid)")
    group.add_argument("--authentication-kubeconfig", metavar="KUBECONFIG",
                       help="check other bearer tokens with TokenReviews at this"
                            " kube-apiserver (a kubeconfig file, or in-cluster)")
    group.add_argument("--authorization-kubeconfig", metavar="KUBECONFIG",
                       help="check every request with a SubjectAccessReview at this"
                            " kube-apiserver (a kubeconfig file, or in-cluster); without"
                            " it every authenticated user may do anything")


def _tls_flags(command: argparse.ArgumentParser, *, default_dir: str) -> None:
    """The serving certificate, as k8s.io/apiserver servers take it."""
    group = command.add_argument_group("serving certificate (as k8s.io/apiserver servers)")
    group.add_argument("--tls-cert-file", "--tls-cert", dest="tls_cert", type=existing_file,
                       help="serving certificate (PEM, intermediates after it); without it a"
                            " self-signed one in --cert-dir, for the addresses served")
    group.add_argument("--tls-private-key-file", "--tls-key", dest="tls_key",
                       type=existing_file, help="the private key of --tls-cert-file (PEM)")
    group.add_argument("--cert-dir", type=Path, help="where the self-signed certificate is"
                       f" kept (default: {default_dir})")


def _tls_options(parser: argparse.ArgumentParser, args: argparse.Namespace) -> dict[str, Any]:
    if (args.tls_cert is None) != (args.tls_key is None):
        parser.exit(2, f"reports-pipeline {args.command}: error: give both --tls-cert-file and"
                       " --tls-private-key-file, or neither\n")
    return {"tls_cert": args.tls_cert, "tls_key": args.tls_key, "cert_dir": args.cert_dir}


def _names(text: str) -> tuple[str, ...]:
    return tuple(n.strip() for n in text.split(",") if n.strip())


def _access_options(args: argparse.Namespace) -> dict[str, Any]:
    return {"client_ca": args.client_ca,
            "request_headers": RequestHeaders(
                args.requestheader_username_headers, args.requestheader_group_headers,
                args.requestheader_extra_headers_prefix, args.requestheader_allowed_names,
                args.requestheader_uid_headers),
            "authentication": args.authentication_kubeconfig,
            "authorization": args.authorization_kubeconfig}


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="reports-pipeline", description=__doc__,
                                     formatter_class=_Help)
    parser.add_argument("--log-level", default="warning", type=str.lower, choices=LOG_LEVELS,
                        help="how much the system logs to stderr")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    up = sub.add_parser(
        "up", help="run the whole system on this machine", formatter_class=_Help,
        description=_about("Run the whole system on this machine: a single-node Apache Kafka"
        " (or KAFKA_BOOTSTRAP), ClickHouse (embedded chDB, or CLICKHOUSE_URL), the"
        " committer, the Faust agents and the frontend. When ready it prints the"
        " kubeconfig to use with kubectl, the frontend URL, the Kafka bootstrap of the"
        " public topics and how to query analytics, and writes them to"
        " DATA/endpoints.json. Stop it with Ctrl-C or SIGTERM."), epilog=ENV_UP)
    up.add_argument("--data-dir", type=Path, required=True,
                    help="where Kafka's log, ClickHouse's data, the TLS files, the kubeconfig"
                         " and endpoints.json live (created if missing)")
    up.add_argument("--host", default="127.0.0.1",
                    help="address the frontend listens on (0.0.0.0: every interface)")
    up.add_argument("--port", type=port, default=0, help="frontend port (0: any free one)")
    _tls_flags(up, default_dir="DATA/tls")
    _access_flags(up, serve=False)

    worker = sub.add_parser(
        "worker", help="run only the committer and the Faust agents", formatter_class=_Help,
        description=_about("Run only the worker: the committer (one at a time commits, others"
        " stand by) and the Faust agents that materialize the change log into ClickHouse"
        " and aggregate it. Production runs it on its own, against a Kafka cluster and"
        " a ClickHouse server."), epilog=ENV_SERVER)
    worker.add_argument("--data-dir", type=Path, default=Path("/var/lib/reports-pipeline"),
                        help="where the Faust agents keep their local state")
    worker.add_argument("--health-port", type=port,
                        help="serve /livez and /readyz over plain HTTP on this port, for the"
                             " kubelet's probes")

    serve = sub.add_parser(
        "serve", help="run only the frontend", formatter_class=_Help,
        description=_about("Run only the frontend, the aggregated API server behind the"
        " kube-apiserver (its APIService objects point here). It answers kubectl and"
        " every Kubernetes client for the report resources and publishes writes to Kafka."),
        epilog=ENV_SERVER)
    serve.add_argument("--data-dir", type=Path, default=Path("/var/lib/reports-pipeline"),
                       help="where the bearer token lives when no client CA is used")
    serve.add_argument("--host", default="0.0.0.0", help="address to listen on")
    serve.add_argument("--port", type=port, default=6443, help="port to listen on")
    _tls_flags(serve, default_dir="DATA/tls")
    _access_flags(serve, serve=True)
    serve.add_argument("--health-port", type=port,
                       help="also serve /livez and /readyz over plain HTTP on this port,"
                            " for the kubelet's probes")

    trends = sub.add_parser(
        "trends", help="print (and chart) failing results over time", formatter_class=_Help,
        description=_about("Failing results per namespace and policy over time: a table, and"
        " with --chart a PNG or SVG chart. Asks a running `up` (--data-dir) or a"
        " ClickHouse server (CLICKHOUSE_URL)."), epilog=ENV_TRENDS)
    trends.add_argument("--data-dir", type=Path,
                        help="ask the `up` running on this directory (embedded ClickHouse);"
                             " without it CLICKHOUSE_URL is queried directly")
    trends.add_argument("--window", default="1m", type=duration,
                        help="bucket size, e.g. 1m, 1h, 1d")
    trends.add_argument("--since", default="24h", type=duration,
                        help="how far back, e.g. 1h, 7d, 30d")
    trends.add_argument("--namespace", help="only this namespace")
    trends.add_argument("--policy", help="only this policy")
    trends.add_argument("--chart", type=Path, help="also draw a chart: FILE.png or FILE.svg")
    trends.add_argument("--top", type=positive, default=10, help="series drawn in the chart")
    trends.add_argument("--rank", choices=("count", "change"), default="count",
                        help="which series the chart draws: the highest counts now, or the"
                             " counts that moved most over the range")

    dash = sub.add_parser(
        "dashboard", help="serve the trends dashboard (web pages)", formatter_class=_Help,
        description=_about("Serve the dashboard: failing results now, over time and where"
        " they come from, as web pages rendered by the server. Reads a running `up`"
        " (--data-dir, through its analytics endpoint, with its kubeconfig's token) or a"
        " ClickHouse server (CLICKHOUSE_URL). Prints the URL to open; it carries the"
        " token once, then a cookie does."), epilog=ENV_DASHBOARD)
    dash.add_argument("--data-dir", type=Path,
                      help="read the `up` running on this directory; without it"
                           " CLICKHOUSE_URL is read directly")
    dash.add_argument("--host", default="127.0.0.1",
                      help="address to listen on (0.0.0.0: every interface)")
    dash.add_argument("--port", type=port, default=8080, help="port to listen on (0: any)")

    dem = sub.add_parser(
        "demo", help="`up` on a fresh data directory, with weeks of history",
        formatter_class=_Help,
        description=_about("Give a fresh data directory weeks of history (the PolicyReports"
        " Kyverno writes for a few teams' Pods: rollouts, failures appearing and being"
        " fixed, background scans), committed at their times in the past, then run the"
        " whole system on it as `up` does. The pipeline materializes and aggregates the"
        " history within a minute of the start: trends, the dashboard and the analytics"
        " queries show the weeks. Later, `up --data-dir` on the same directory."),
        epilog=ENV_UP)
    dem.add_argument("--data-dir", type=Path, required=True,
                     help="a new directory (as `up --data-dir`)")
    dem.add_argument("--days", type=positive, default=28, help="days of history")
    dem.add_argument("--seed", type=int, default=1, help="random seed of the history")
    dem.add_argument("--host", default="127.0.0.1",
                     help="address the frontend listens on (0.0.0.0: every interface)")
    dem.add_argument("--port", type=port, default=0, help="frontend port (0: any free one)")

    migrate_parser = sub.add_parser(
        "migrate", help="move reports from a cluster's CRDs into the store, or back",
        formatter_class=_Help,
        description=_about("Copy every report (PolicyReports, ClusterPolicyReports,"
        " EphemeralReports, ClusterEphemeralReports, Reports, ClusterReports) between a"
        " cluster's CRDs and the store, keeping names, namespaces, labels, annotations,"
        " ownerReferences, finalizers and content. Pages through lists, may be run again"
        " (nothing is duplicated), shows progress and ends with a summary. docs/migrate.md"
        " gives the switch-over and the rollback step by step."))
    directions = migrate_parser.add_subparsers(dest="direction", required=True,
                                               metavar="DIRECTION")
    for direction, text, existing in (
            ("in", "from the cluster's CRDs into the store", "update"),
            ("out", "from the store back into the cluster's CRDs (a rollback)", "keep")):
        command = directions.add_parser(direction, help=text, formatter_class=_Help,
                                        description=_about(f"Copy every report {text}."))
        command.add_argument("--kubeconfig", type=Path,
                             help="the cluster (its APIServices decide which side serves"
                                  " the report groups); as kubectl, $KUBECONFIG (a list) or"
                                  " ~/.kube/config when not given")
        store = command.add_mutually_exclusive_group(required=True)
        store.add_argument("--store", type=Path, metavar="KUBECONFIG",
                           help="the store's frontend, reached directly (an installed"
                                " chart's Service through `kubectl port-forward`)")
        store.add_argument("--data-dir", type=Path,
                           help="the store of the `up` running on this directory")
        command.add_argument("--page-size", type=positive, default=500,
                             help="objects per list page")
        command.add_argument("--concurrency", type=positive, default=16,
                             help="copies in flight at once")
        command.add_argument("--existing", choices=("update", "keep"), default=existing,
                             help="an object the destination already holds with other"
                                  " content: replaced by the source's (update) or left as"
                                  " it is (keep)")
        if direction == "in":
            command.add_argument(
                "--switch", type=Path, metavar="MANIFEST",
                help="after the copy, follow the CRDs, take over the report groups'"
                     " APIServices with the ones in MANIFEST (the chart's), and end once"
                     " the CRDs have been quiet for --settle seconds")
            command.add_argument("--settle", type=float, default=5.0,
                                 help="seconds without a change to the CRDs after the"
                                      " switch before following ends")
        else:
            command.add_argument("--switch-back", action="store_true",
                                 help="first give the report groups back to the CRDs"
                                      " (delete the store's APIServices)")

    # the commands of installed entry points (the benchmark): found, not imported
    for name, found in commands.discovered().items():
        if isinstance(found, commands.Unavailable):
            # every word after its name is its own, none an option of this parser
            extra = sub.add_parser(name, help=found.help, add_help=False, prefix_chars="\0")
        else:
            extra = sub.add_parser(name, help=found.help, formatter_class=_Help,
                                   description=_about(found.description))
        found.configure(extra)
        extra.set_defaults(extra_command=found)

    return parser


def _trends(args: argparse.Namespace, settings: Settings) -> int:
    try:
        query = TrendQuery(settings.cluster, args.window, args.since, args.namespace,
                           args.policy)
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
            switch = transfer.read_apiservices(args.switch.read_text())
        plan = transfer.Plan(args.direction, page_size=args.page_size,
                             concurrency=args.concurrency, existing=args.existing,
                             switch=switch, switch_back=getattr(args, "switch_back", False),
                             settle=getattr(args, "settle", 5.0))

        async def run_it() -> Any:
            cluster, store = await target(args.kubeconfig), await target(store_config)
            async with transfer.Api(cluster, "the cluster") as c, \
                    transfer.Api(store, "the store") as s:
                return await transfer.migrate(plan, cluster=c, store=s,
                                              say=lambda line: print(line, file=sys.stderr,
                                                                     flush=True))
        tally = asyncio.run(run_it())
    except (ConfigError, transfer.MigrationError, OSError, ValueError) as err:
        print(f"{name}: {err}", file=sys.stderr)
        return 1
    print("\n".join(tally.lines(transfer.RESOURCES)))
    failed = tally.total(transfer.FAILED)
    if failed:
        print(f"{name}: {failed} objects failed", file=sys.stderr)
    return 1 if failed or tally.notes else 0


def _say(message: str) -> None:
    print(message, flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = _parser()
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
