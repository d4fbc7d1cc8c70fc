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
import random
import secrets
import shutil
import signal
import statistics
import sys
import tempfile
import textwrap
import time
from collections.abc import Coroutine
from dataclasses import replace
from pathlib import Path
from typing import Any, TypeVar

import orjson

from apiserver import schema
from apiserver.authn import RequestHeaders
from bench import faults as bench_faults
from bench import scale as bench_scale
from bench.figures import Report
from bench.runner import Options as BenchOptions
from bench.runner import run as bench_run
from bench.runner import write_json
from bench.scale import Options as ScaleOptions
from bench.sidebyside import table as side_by_side_table
from bench.workload import Mix, resources
from kubeclient import ConfigError, KubeClientError, target
from launcher import demo, migrate
from launcher.broker import BrokerError
from launcher.dashboard import serve_dashboard
from launcher.incluster import ClusterError, cluster_from_env
from launcher.kafkacluster import KafkaCluster
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
from pipeline.model.resources import by_id
from pipeline.runtime import memory
from pipeline.settings import Settings
from reportsamples.reports import ephemeral_report, policy_report

T = TypeVar("T")

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

    bench = sub.add_parser(
        "bench", help="measure the system (throughput, latency, soak, analytics)",
        formatter_class=_Help,
        description=_about("The benchmark: starts a fresh `up`, drives Kyverno-shaped traffic"
        " through its frontend (throughput, latency, watches, LIST, a sustained soak)"
        " and compares the analytics questions with a PostgreSQL JSONB baseline. Prints"
        " a table of figures against their targets and writes them as JSON."))
    defaults = BenchOptions()
    bench.add_argument("--quick", action="store_true",
                       help="a smaller run that finishes in a few minutes")
    for name, kind, text in (
            ("resources", int, "Pods with a PolicyReport that the traffic writes"),
            ("namespaces", int, "namespaces the workload's Pods are spread over"),
            ("list-size", int, "reports in the namespace that is listed"),
            ("concurrency", int, "clients of the throughput phases (the more of the two"
             " compared side by side)"),
            ("few-clients", int, "the fewer clients of the phases compared side by side"),
            ("duration", float, "seconds of the throughput phase"),
            ("rate", float, "offered writes/s of the latency phase"),
            ("low-rate", float, "offered writes/s of a second latency phase, below capacity"),
            ("latency-duration", float, "seconds of the latency phase"),
            ("watchers", int, "concurrent watches of the watch phase"),
            ("watch-rate", float, "writes/s during the watch phase"),
            ("watch-duration", float, "seconds of the watch phase"),
            ("analytics-reports", int, "reports loaded for the analytics comparison"),
            ("mix", str, "traffic proportions, e.g. admission=50,background=40,read=10"),
            ("seed", int, "random seed of the workload"),
            ("soak-minutes", float, "minutes of the sustained phase at each number of"
             " clients (0: none)"),
            ("baseline-soak-minutes", float, "minutes of the etcd-CRD baseline's (and"
             " --against's) sustained phase (default: --soak-minutes, 5 at most)")):
        field = name.replace("-", "_")
        bench.add_argument(f"--{name}", type=kind, default=None,
                           help=f"{text} (default {getattr(defaults, field)};"
                                f" --quick: {getattr(BenchOptions.quick(), field)})")
    bench.add_argument("--no-baseline", dest="baseline", action="store_false", default=None,
                       help="do not measure the etcd-CRD baseline (kube-apiserver and etcd,"
                            " built from their Go modules on first use)")
    bench.add_argument("--against", type=Path, metavar="KUBECONFIG",
                       help="also drive the compared phases against the Kubernetes API of"
                            " this kubeconfig (a column of its own beside the baseline)")
    bench.add_argument("--data-dir", type=Path,
                       help="keep the system's, the baseline's and PostgreSQL's data here"
                            " (default: a temporary directory, removed afterwards)")
    bench.add_argument("--output", type=Path, default=Path("bench-results.json"),
                       help="where the figures are written as JSON")
    bench.add_argument("--kafka-brokers", type=int, default=0, metavar="N",
                       help="instead: start a Kafka cluster of N KRaft nodes on loopback"
                            " (production defaults: 3 replicas, 2 in sync), run `up` against"
                            " it and break its brokers under load, one fault after another"
                            " (--faults); print each fault's outage, p99 and errors")
    bench.add_argument("--faults", default=",".join(bench_faults.FAULTS),
                       help="the faults of --kafka-brokers, in order (default: all)")
    bench.add_argument("--fault-seconds", type=float, default=30.0,
                       help="seconds of load before each fault and after it is over")
    scale = ScaleOptions(sizes=())
    bench.add_argument("--scale", metavar="N,N,...",
                       help="instead: fill one `up` to each number of reports in turn (the"
                            " bulk on a fast path through the committer) and print a row per"
                            " size: create rate, GET, LIST of everything, memory, restart,"
                            " disk, analytics against PostgreSQL JSONB, watch lag (--watchers,"
                            f" default {scale.watchers} here; --watch-rate, default"
                            f" {scale.watch_rate:g}; --watch-duration, default"
                            f" {scale.watch_seconds:g}; --namespaces, default"
                            f" {scale.namespaces}; --few-clients, the creating and reading"
                            f" clients, default {scale.clients})")
    bench.add_argument("--scale-apis", default="system,etcd", metavar="API,...",
                       help="with --scale: whose rows, this system's (system) and etcd CRDs'"
                            " (etcd; --no-baseline leaves them out)")
    bench.add_argument("--scale-creates", type=int, default=scale.creates, metavar="N",
                       help="with --scale: creates through the API at each size, whose rate"
                            " is the size's")
    bench.add_argument("--kafka-config", action="append", default=[], metavar="KEY=VALUE",
                       help="a broker setting of --kafka-brokers' nodes on top of Kafka's"
                            " defaults and production's, for example"
                            " broker.session.timeout.ms=4500 (repeatable)")
    return parser


def _bench_faults(args: argparse.Namespace) -> int:
    """``bench --kafka-brokers N``: the fault phases against a cluster this
    process starts and stops."""
    names = [n.strip() for n in args.faults.split(",") if n.strip()]
    unknown = [n for n in names if n not in bench_faults.FAULTS]
    if unknown or args.kafka_brokers < 3:
        print(f"reports-pipeline bench: --faults: unknown {', '.join(unknown)} (known:"
              f" {', '.join(bench_faults.FAULTS)})" if unknown else
              "reports-pipeline bench: --kafka-brokers needs 3 nodes or more", file=sys.stderr)
        return 2
    config = dict(item.partition("=")[::2] for item in args.kafka_config)
    if any(not k or not v for k, v in config.items()):
        print("reports-pipeline bench: --kafka-config takes KEY=VALUE", file=sys.stderr)
        return 2
    base = args.data_dir or Path(tempfile.mkdtemp(prefix="reports-faults-"))

    async def faults() -> Report:
        cluster = KafkaCluster(base / "kafka", nodes=args.kafka_brokers, config=config,
                               progress=_progress_line)
        await cluster.start()
        if config:
            print("-- broker settings: " + ", ".join(f"{k}={v}" for k, v in config.items()),
                  flush=True)
        try:
            return await bench_faults.run(
                cluster, base / "system", names, before=args.fault_seconds,
                after=args.fault_seconds, progress=_progress_line)
        finally:
            await cluster.stop()

    try:
        report = asyncio.run(_stopped_by_sigterm(faults()))
    except (OSError, RuntimeError, KubeClientError) as err:
        print(f"reports-pipeline bench: {err}", file=sys.stderr)
        return 1
    except (KeyboardInterrupt, asyncio.CancelledError):
        print("reports-pipeline bench: stopped", file=sys.stderr)
        return 130
    finally:
        if args.data_dir is None:
            shutil.rmtree(base, ignore_errors=True)
    print(report.table())
    written = write_json(report, args.output)
    print("figures written to " + " and ".join(str(p) for p in written))
    return 0


def _bench_scale(args: argparse.Namespace) -> int:
    """``bench --scale N,N,...``: a row of figures per number of reports."""
    try:
        sizes = tuple(int(n.replace("_", "")) for n in args.scale.split(",") if n.strip())
    except ValueError:
        sizes = ()
    apis = {a.strip() for a in args.scale_apis.split(",") if a.strip()}
    if not apis or apis - {"system", "etcd"}:
        print("reports-pipeline bench: --scale-apis takes system, etcd or both",
              file=sys.stderr)
        return 2
    if not sizes or min(sizes) < args.scale_creates or args.scale_creates < 1:
        print("reports-pipeline bench: --scale takes numbers of reports, each at least"
              f" --scale-creates ({args.scale_creates}), e.g. 10000,100000,1000000",
              file=sys.stderr)
        return 2
    given = {"watchers": args.watchers, "watch_rate": args.watch_rate,
             "watch_seconds": args.watch_duration, "namespaces": args.namespaces,
             "clients": args.few_clients, "seed": args.seed, "data_dir": args.data_dir,
             "baseline": "etcd" in apis and args.baseline is not False,
             "system": "system" in apis}
    options = replace(ScaleOptions(sizes=sizes, creates=args.scale_creates),
                      **{k: v for k, v in given.items() if v is not None})
    rows, code = _run_bench(bench_scale.run(options, progress=_progress_line))
    if rows is None:
        return code
    for name, api_rows in rows.items():
        print(f"\n{name.upper()}\n" + bench_scale.table(api_rows))
        for row in api_rows:
            print(f"\n{name}, {row.size:,} reports:\n"
                  + "\n".join(f"  {n}" for n in row.notes))
        print(f"\n{name}: " + bench_scale.verdicts(api_rows))
    args.output.write_bytes(orjson.dumps(bench_scale.to_json(options, rows),
                                         option=orjson.OPT_INDENT_2))
    print(f"figures written to {args.output}")
    return 0


def _bench(args: argparse.Namespace) -> int:
    if args.kafka_brokers:
        return _bench_faults(args)
    if args.scale:
        return _bench_scale(args)
    options = BenchOptions.quick() if args.quick else BenchOptions()
    overrides = {k: v for k, v in vars(args).items()
                 if k in BenchOptions.__dataclass_fields__ and v is not None}
    try:
        options = replace(options, **overrides)
        Mix.parse(options.mix)
        if args.data_dir is not None:
            try:
                args.data_dir.mkdir(parents=True, exist_ok=True)
            except OSError as err:
                raise OSError(f"cannot use --data-dir {args.data_dir}:"
                              f" {err.strerror or err}") from err
        if options.against is not None and not options.against.is_file():
            raise ValueError(f"--against {options.against}: no such kubeconfig")
    except (ValueError, OSError) as err:
        print(f"reports-pipeline bench: {err}", file=sys.stderr)
        return 1
    report, code = _run_bench(bench_run(options, progress=_progress_line))
    if report is None:
        return code
    _validation_cost(report)
    print(report.table())
    compared = side_by_side_table(report)
    if compared:
        print("\nSide by side (ratio: this system over etcd CRDs, in the same run):")
        print(compared)
    written = write_json(report, args.output)
    print("figures written to " + " and ".join(str(p) for p in written))
    return 0


def _progress_line(message: str) -> None:
    print(f"-- {message}", flush=True)


def _run_bench(main: Coroutine[Any, Any, T]) -> tuple[T | None, int]:
    """``main``'s result, or None and the exit code of its failure, said in
    one line."""
    try:
        return asyncio.run(_stopped_by_sigterm(main)), 0
    except (ValueError, OSError, RuntimeError) as err:
        print(f"reports-pipeline bench: {err}", file=sys.stderr)
    except KubeClientError as err:
        print(f"reports-pipeline bench: a request failed: {err}", file=sys.stderr)
    except (KeyboardInterrupt, asyncio.CancelledError):
        # everything the run started was stopped on its way out
        print("reports-pipeline bench: stopped", file=sys.stderr)
        return None, 130
    return None, 1


async def _stopped_by_sigterm(main: Coroutine[Any, Any, T]) -> T:
    """``main``, cancelled by SIGTERM as Ctrl-C cancels it: every process it
    started is stopped by its cleanup rather than left running."""
    task = asyncio.current_task()
    assert task is not None
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, task.cancel)
    return await main


def _validation_cost(report: Report, runs: int = 5, each: int = 1000) -> None:
    """What the frontend's schema validation costs a write: the workload's
    PolicyReport and EphemeralReport validated in this process (the frontend
    does the same work on its event loop for every create, update and patch)."""
    rng = random.Random(1)
    [pod] = resources(1, 1, prefix="cost", rng=rng)
    now = int(time.time())
    bodies = [(by_id("policyreports.wgpolicyk8s.io"), policy_report(pod, now)),
              (by_id("ephemeralreports.reports.kyverno.io"), ephemeral_report(pod, now))]
    for rtype, body in bodies:
        assert not schema.causes(rtype, body)
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        for _ in range(each):
            for rtype, body in bodies:
                schema.causes(rtype, body)
        times.append((time.perf_counter() - started) / (each * len(bodies)))
    report.add("schema validation per write", statistics.median(times) * 1e6, "us",
               note=f"the workload's reports, median of {runs} x {each * len(bodies)}")


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
            switch = migrate.read_apiservices(args.switch.read_text())
        plan = migrate.Plan(args.direction, page_size=args.page_size,
                            concurrency=args.concurrency, existing=args.existing,
                            switch=switch, switch_back=getattr(args, "switch_back", False),
                            settle=getattr(args, "settle", 5.0))

        async def run_it() -> Any:
            cluster, store = await target(args.kubeconfig), await target(store_config)
            async with migrate.Api(cluster, "the cluster") as c, \
                    migrate.Api(store, "the store") as s:
                return await migrate.migrate(plan, cluster=c, store=s,
                                             say=lambda line: print(line, file=sys.stderr,
                                                                    flush=True))
        tally = asyncio.run(run_it())
    except (ConfigError, migrate.MigrationError, OSError, ValueError) as err:
        print(f"{name}: {err}", file=sys.stderr)
        return 1
    print("\n".join(tally.lines(migrate.RESOURCES)))
    failed = tally.total(migrate.FAILED)
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
    if args.command == "bench":
        return _bench(args)
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
