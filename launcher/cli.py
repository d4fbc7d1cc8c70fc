"""The ``reports-pipeline`` command.

  up      the whole system on one machine (a single-node Apache Kafka and chDB
          by default)
  worker  only the Faust agents (production: scaled on their own)
  serve   only the frontend (production: behind the kube-apiserver aggregator)
  trends  fail counts per namespace and policy over time, as a table and a chart
  bench   the benchmark: Kyverno-shaped traffic against a fresh `up`, and the
          analytics questions against a PostgreSQL JSONB baseline
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import logging
import sys
from collections.abc import Coroutine
from dataclasses import replace
from pathlib import Path
from typing import Any

import uvloop

from bench.runner import Options as BenchOptions
from bench.runner import run as bench_run
from bench.runner import write_json
from bench.workload import Mix
from launcher.system import AlreadyRunning, ServeOptions, data_dir_lock, run
from launcher.trends import (
    Analytics,
    RunningSystem,
    ServerAnalytics,
    TrendQuery,
    parse_duration,
    run_trends,
)
from pipeline.settings import Settings


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="reports-pipeline", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--log-level", default="WARNING")
    sub = parser.add_subparsers(dest="command", required=True)
    up = sub.add_parser("up", help="run the whole system on one machine")
    up.add_argument("--data-dir", type=Path, required=True,
                    help="where ClickHouse data, TLS files and the kubeconfig live")
    up.add_argument("--host", default="127.0.0.1", help="address the frontend listens on")
    up.add_argument("--port", type=int, default=0, help="frontend port (0: any free one)")
    worker = sub.add_parser("worker", help="run only the Faust agents")
    worker.add_argument("--data-dir", type=Path, default=Path("/var/lib/reports-pipeline"))
    serve = sub.add_parser("serve", help="run only the frontend")
    serve.add_argument("--data-dir", type=Path, default=Path("/var/lib/reports-pipeline"))
    serve.add_argument("--host", default="0.0.0.0")
    serve.add_argument("--port", type=int, default=6443)
    serve.add_argument("--tls-cert", type=Path, required=True)
    serve.add_argument("--tls-key", type=Path, required=True)
    serve.add_argument("--client-ca", type=Path,
                       help="require client certificates signed by this CA (the aggregator's"
                            " front-proxy CA); without it a bearer token under data-dir is"
                            " required")
    trends = sub.add_parser("trends", help="print (and chart) fail counts over time")
    trends.add_argument("--data-dir", type=Path,
                        help="ask the `up` running on this directory (embedded ClickHouse);"
                             " without it CLICKHOUSE_URL is queried directly")
    trends.add_argument("--window", default="1m", help="bucket size, e.g. 1m, 1h, 1d")
    trends.add_argument("--since", default="24h", help="how far back, e.g. 1h, 7d, 30d")
    trends.add_argument("--namespace", help="only this namespace")
    trends.add_argument("--policy", help="only this policy")
    trends.add_argument("--chart", type=Path, help="also draw a chart: FILE.png or FILE.svg")
    trends.add_argument("--top", type=int, default=10, help="series drawn in the chart")
    bench = sub.add_parser("bench", help="measure the system against this round's targets")
    defaults = BenchOptions()
    bench.add_argument("--quick", action="store_true",
                       help="a smaller run that finishes in under two minutes")
    for name, kind, text in (
            ("resources", int, "Pods with a PolicyReport that the traffic writes"),
            ("namespaces", int, "namespaces the workload's Pods are spread over"),
            ("list-size", int, "reports in the namespace that is listed"),
            ("concurrency", int, "clients of the throughput phases"),
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
            ("soak-minutes", float, "minutes of the sustained phase (0: none)")):
        field = name.replace("-", "_")
        bench.add_argument(f"--{name}", type=kind, default=None,
                           help=f"{text} (default {getattr(defaults, field)})")
    bench.add_argument("--data-dir", type=Path,
                       help="keep the system's and PostgreSQL's data here (default: a"
                            " temporary directory, removed afterwards)")
    bench.add_argument("--output", type=Path, default=Path("bench-results.json"),
                       help="where the figures are written as JSON")
    return parser


def _bench(args: argparse.Namespace) -> int:
    options = BenchOptions.quick() if args.quick else BenchOptions()
    overrides = {k: v for k, v in vars(args).items()
                 if k in BenchOptions.__dataclass_fields__ and v is not None}
    try:
        options = replace(options, **overrides)
        Mix.parse(options.mix)
        report = asyncio.run(bench_run(options, progress=lambda m: print(f"-- {m}", flush=True)))
    except (ValueError, OSError, RuntimeError) as err:
        print(f"reports-pipeline bench: {err}", file=sys.stderr)
        return 1
    print(report.table())
    write_json(report, args.output)
    print(f"figures written to {args.output}")
    return 0


def _trends(args: argparse.Namespace, settings: Settings) -> int:
    try:
        query = TrendQuery(settings.cluster, parse_duration(args.window),
                           parse_duration(args.since), args.namespace, args.policy)
        if args.chart is not None and args.chart.suffix.lower() not in (".png", ".svg"):
            raise ValueError("--chart must name a .png or .svg file")
        source: Analytics
        if args.data_dir is not None:
            source = RunningSystem(args.data_dir)
        elif settings.clickhouse_url:
            source = ServerAnalytics(settings)
        else:
            raise ValueError("give --data-dir of a running `up`, or set CLICKHOUSE_URL")
        print(asyncio.run(run_trends(source, query, chart=args.chart, top=args.top)))
    except (ValueError, OSError, RuntimeError) as err:
        print(f"reports-pipeline trends: {err}", file=sys.stderr)
        return 1
    if args.chart is not None:
        print(f"chart written to {args.chart}")
    return 0


#: Collector thresholds of serving processes. A full collection walks every
#: live object (millions once the caches hold thousands of parsed reports) and
#: stops the process for 100-400 ms; with CPython's default (700, 10, 10) it ran
#: every few seconds under load and set the write p99. Young generations keep
#: their default; the oldest waits for a hundred times more of their runs.
GC_THRESHOLDS = (700, 10, 1000)


def _serve(main: Coroutine[Any, Any, None]) -> None:
    """Run a serving process on uvloop: its event loop carries every request,
    Kafka record and agent step of the process."""
    gc.set_threshold(*GC_THRESHOLDS)
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        runner.run(main)


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
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
    if args.command == "up":
        options = ServeOptions(args.data_dir, host=args.host, port=args.port)
        try:
            with data_dir_lock(args.data_dir):
                _serve(run(settings, options))
        except AlreadyRunning as err:
            print(f"reports-pipeline: {err}", file=sys.stderr)
            return 1
        return 0
    if not (settings.kafka_bootstrap and settings.clickhouse_url):
        print("reports-pipeline: worker and serve need KAFKA_BOOTSTRAP and CLICKHOUSE_URL;"
              " use `up` for the embedded defaults", file=sys.stderr)
        return 2
    if args.command == "worker":
        options = ServeOptions(args.data_dir, frontend=False)
    else:
        options = ServeOptions(args.data_dir, worker=False, host=args.host, port=args.port,
                               tls_cert=args.tls_cert, tls_key=args.tls_key,
                               client_ca=args.client_ca, write_kubeconfig=False)
    _serve(run(settings, options))
    return 0


if __name__ == "__main__":
    sys.exit(main())
