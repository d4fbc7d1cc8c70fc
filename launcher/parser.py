"""The ``reports-pipeline`` command line: one function per command adds its
parser, its options and their help, as ``reports-pipeline COMMAND --help``
shows them. Parses only: ``launcher.cli`` runs what the line names."""

from __future__ import annotations

import argparse
import textwrap
from pathlib import Path
from typing import TypeAlias

from launcher import commands
from launcher.trends import parse_duration
from pipeline.fleet.sources import Source, SourceError, from_flag

#: what each command's parser is added to
Commands: TypeAlias = "argparse._SubParsersAction[argparse.ArgumentParser]"

#: ``reports-pipeline --help``'s description
OVERVIEW = """Kubernetes policy reports kept in Kafka and ClickHouse instead of etcd, served
to kubectl and every Kubernetes client through the aggregation layer.

commands:
  up      the whole system on this machine (a single-node Apache Kafka and
          embedded ClickHouse unless KAFKA_BOOTSTRAP and CLICKHOUSE_URL are set)
  worker  only the committer and the Faust agents (production: scaled on their own)
  serve   only the frontend (production: behind the kube-apiserver aggregator)
  trends  failing results per namespace and policy over time, as a table and a chart
  dashboard  the trends as web pages
  demo    `up` on a fresh data directory given weeks of Kyverno-shaped history
  migrate  reports between a cluster's CRDs and the store
  fleet   many clusters' public topics followed into one analytics store
  bench   the benchmark: Kyverno-shaped traffic against a fresh `up`, and the
          analytics questions against a PostgreSQL JSONB baseline

`reports-pipeline COMMAND --help` explains each.
"""

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


ENV_FLEET = """environment:
  CLICKHOUSE_URL    a ClickHouse server for the fleet's store (default: embedded
                    chDB under DATA/clickhouse)
  REPORTS_DATABASE  its database (default: reports)"""


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


def _names(text: str) -> tuple[str, ...]:
    return tuple(n.strip() for n in text.split(",") if n.strip())


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="reports-pipeline", description=OVERVIEW,
                                     formatter_class=_Help)
    parser.add_argument("--log-level", default="warning", type=str.lower, choices=LOG_LEVELS,
                        help="how much the system logs to stderr")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for add in (_up, _worker, _serve, _trends, _dashboard, _demo, _migrate, _fleet,
                _entry_points):
        add(sub)
    return parser


def _up(sub: Commands) -> None:
    """``up``: the whole system on this machine."""
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


def _worker(sub: Commands) -> None:
    """``worker``: only the committer and the Faust agents."""
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


def _serve(sub: Commands) -> None:
    """``serve``: only the frontend."""
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


def _trends(sub: Commands) -> None:
    """``trends``: failing results over time, a table and a chart."""
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
    trends.add_argument("--cluster",
                        help="only this cluster (default: REPORTS_CLUSTER; with --by cluster:"
                             " every cluster)")
    trends.add_argument("--by", choices=("namespace", "cluster"), default="namespace",
                        help="a series per namespace and policy, or per cluster and policy"
                             " over all its namespaces (a fleet's store)")
    trends.add_argument("--namespace", help="only this namespace")
    trends.add_argument("--policy", help="only this policy")
    trends.add_argument("--chart", type=Path, help="also draw a chart: FILE.png or FILE.svg")
    trends.add_argument("--top", type=positive, default=10, help="series drawn in the chart")
    trends.add_argument("--rank", choices=("count", "change"), default="count",
                        help="which series the chart draws: the highest counts now, or the"
                             " counts that moved most over the range")


def _dashboard(sub: Commands) -> None:
    """``dashboard``: the trends as web pages."""
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


def _demo(sub: Commands) -> None:
    """``demo``: ``up`` on a fresh data directory given weeks of history."""
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


def _fleet(sub: Commands) -> None:
    """``fleet``: many clusters' public topics into one analytics store."""
    fleet = sub.add_parser(
        "fleet", help="follow several clusters' public topics into one analytics store",
        formatter_class=_Help,
        description=_about("Follow the public topics of several clusters (each one's change"
        " log and summaries, read_committed) into one analytics store, with the cluster in"
        " every row: its current reports, the results' history and the trend tables. Each"
        " batch is written with the positions it ends at, so a restart (after a crash too)"
        " counts nothing twice. The store is served read-only as `up` serves its own:"
        " `trends --data-dir DATA` and `dashboard --data-dir DATA` read it, and"
        " /fleet/v1/sources shows each cluster's state (following, unreachable, or resync"
        " when its change log no longer holds what the fleet has not taken)."),
        epilog=ENV_FLEET)
    fleet.add_argument("--data-dir", type=Path, required=True,
                       help="the fleet's directory: its embedded ClickHouse, TLS and kubeconfig")
    fleet.add_argument("--source", action="append", default=[], type=_source,
                       metavar="NAME=BOOTSTRAP[/PREFIX]",
                       help="a cluster to follow: its name, its Kafka's bootstrap servers and"
                            " its topic prefix (default reports); repeatable")
    fleet.add_argument("--config", type=Path,
                       help="a YAML file of clusters (name, bootstrap, prefix), read again when"
                            " it changes")
    fleet.add_argument("--host", default="127.0.0.1",
                       help="address the analytics endpoint listens on (0.0.0.0: every"
                            " interface)")
    fleet.add_argument("--port", type=port, default=0, help="its port (0: any free one)")
    fleet.add_argument("--resync", metavar="NAME",
                       help="instead of following: bring cluster NAME's rows back to what its"
                            " API lists (--kubeconfig) and follow its change log again from"
                            " the oldest record it holds, then exit (the fleet must be stopped)")
    fleet.add_argument("--kubeconfig", type=existing_file,
                       help="with --resync: the kubeconfig of the cluster's API")


def _source(text: str) -> Source:
    try:
        return from_flag(text)
    except SourceError as err:
        raise argparse.ArgumentTypeError(str(err)) from err


def _migrate(sub: Commands) -> None:
    """``migrate in|out``: reports between a cluster's CRDs and the store."""
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


def _entry_points(sub: Commands) -> None:
    """The commands of installed entry points (the benchmark): found, not imported."""
    for name, found in commands.discovered().items():
        if isinstance(found, commands.Unavailable):
            # every word after its name is its own, none an option of this parser
            extra = sub.add_parser(name, help=found.help, add_help=False, prefix_chars="\0")
        else:
            extra = sub.add_parser(name, help=found.help, formatter_class=_Help,
                                   description=_about(found.description))
        found.configure(extra)
        extra.set_defaults(extra_command=found)
