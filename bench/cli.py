"""``reports-pipeline bench``: the benchmark's options, and running it.

The launcher finds this command through the ``reports_pipeline.commands``
entry point (``COMMAND``) and never imports it: the benchmark needs the
``bench`` extra, which a running system does not.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import shutil
import signal
import statistics
import sys
import tempfile
import time
from collections.abc import Coroutine
from dataclasses import replace
from pathlib import Path
from typing import Any, TypeVar

import orjson

from apiserver.contract import schema
from bench import faults as bench_faults
from bench import fleet as bench_fleet
from bench import scale as bench_scale
from bench import soak as bench_soak
from bench.figures import Report
from bench.fleet import Options as FleetOptions
from bench.scale import Options as ScaleOptions
from bench.sidebyside import table as side_by_side_table
from bench.standardrun import Options as BenchOptions
from bench.standardrun import run as bench_run
from bench.standardrun import write_json
from bench.workload import Mix, resources
from kubeclient import KubeClientError
from launcher.broker.cluster import KafkaCluster
from launcher.commands import Command
from pipeline.model.resources import by_id
from reportsamples.reports import ephemeral_report, policy_report

T = TypeVar("T")


class Bench:
    """The ``bench`` command."""

    help = "measure the system (throughput, latency, soak, analytics)"
    description = ("The benchmark: starts a fresh `up`, drives Kyverno-shaped traffic"
                   " through its frontend (throughput, latency, watches, LIST, a sustained"
                   " soak) and compares the analytics questions with a PostgreSQL JSONB"
                   " baseline. Prints a table of figures against their targets and writes"
                   " them as JSON.")

    def configure(self, parser: argparse.ArgumentParser) -> None:
        _arguments(parser)

    def run(self, args: argparse.Namespace) -> int:
        return _bench(args)


COMMAND: Command = Bench()


def _arguments(parser: argparse.ArgumentParser) -> None:
    defaults = BenchOptions()
    parser.add_argument("--quick", action="store_true",
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
        parser.add_argument(f"--{name}", type=kind, default=None,
                            help=f"{text} (default {getattr(defaults, field)};"
                                 f" --quick: {getattr(BenchOptions.quick(), field)})")
    parser.add_argument("--no-baseline", dest="baseline", action="store_false", default=None,
                        help="do not measure the etcd-CRD baseline (kube-apiserver and etcd,"
                             " built from their Go modules on first use)")
    parser.add_argument("--against", type=Path, metavar="KUBECONFIG",
                        help="also drive the compared phases against the Kubernetes API of"
                             " this kubeconfig (a column of its own beside the baseline)")
    parser.add_argument("--data-dir", type=Path,
                        help="keep the system's, the baseline's and PostgreSQL's data here"
                             " (default: a temporary directory, removed afterwards)")
    parser.add_argument("--output", type=Path, default=Path("bench-results.json"),
                        help="where the figures are written as JSON")
    parser.add_argument("--kafka-brokers", type=int, default=0, metavar="N",
                        help="instead: start a Kafka cluster of N KRaft brokers on loopback"
                             " (production defaults: 3 replicas, 2 in sync), run `up` against"
                             " it and break its brokers under load, one fault after another"
                             " (--faults); print each fault's outage, p99 and errors")
    parser.add_argument("--kafka-controllers", type=int, default=3, metavar="N",
                        help="the KRaft controllers of --kafka-brokers' cluster, each a node of"
                             " its own (default 3); 0: every broker is a controller too")
    parser.add_argument("--faults", default=",".join(bench_faults.FAULTS),
                        help="the faults of --kafka-brokers, in order (default: all)")
    parser.add_argument("--fault-seconds", type=float, default=30.0,
                        help="seconds of load before each fault and after it is over")
    scale = ScaleOptions(sizes=())
    parser.add_argument("--scale", metavar="N,N,...",
                        help="instead: fill one `up` to each number of reports in turn (the"
                             " bulk on a fast path through the committer) and print a row per"
                             " size: create rate, GET, LIST of everything, memory, restart,"
                             " disk, analytics against PostgreSQL JSONB, watch lag (--watchers,"
                             f" default {scale.watchers} here; --watch-rate, default"
                             f" {scale.watch_rate:g}; --watch-duration, default"
                             f" {scale.watch_seconds:g}; --namespaces, default"
                             f" {scale.namespaces}; --few-clients, the creating and reading"
                             f" clients, default {scale.clients}; --soak-minutes, default"
                             f" {scale.soak_minutes:g} here: the sustained phase at the largest"
                             " size, its figures per minute)")
    parser.add_argument("--scale-apis", default="system,etcd", metavar="API,...",
                        help="with --scale: whose rows, this system's (system) and etcd CRDs'"
                             " (etcd; --no-baseline leaves them out)")
    parser.add_argument("--scale-creates", type=int, default=scale.creates, metavar="N",
                        help="with --scale: creates through the API at each size, whose rate"
                             " is the size's")
    fleet = FleetOptions()
    parser.add_argument("--fleet", action="store_true",
                        help="instead: a fleet following --fleet-clusters live `up` systems"
                             " under load (its lag, CPU per change, RSS), then the fleet's"
                             " questions over --fleet-simulated clusters of"
                             " --fleet-simulated-reports reports each (--quick: smaller)")
    parser.add_argument("--fleet-clusters", type=int, default=fleet.clusters, metavar="N",
                        help="with --fleet: live clusters")
    parser.add_argument("--fleet-rate", type=float, default=fleet.rate, metavar="N",
                        help="with --fleet: steps/s offered to each cluster in the open-loop"
                             " phase before the closed-loop one (0: none)")
    parser.add_argument("--fleet-simulated", type=int, default=fleet.simulated_clusters,
                        metavar="N", help="with --fleet: simulated clusters")
    parser.add_argument("--fleet-simulated-reports", type=int,
                        default=fleet.simulated_reports, metavar="N",
                        help="with --fleet: reports of each simulated cluster")
    parser.add_argument("--kafka-config", action="append", default=[], metavar="KEY=VALUE",
                        help="a broker setting of --kafka-brokers' nodes on top of Kafka's"
                             " defaults and production's, for example"
                             " broker.session.timeout.ms=4500 (repeatable)")


def _bench_faults(args: argparse.Namespace) -> int:
    """``bench --kafka-brokers N``: the fault phases against a cluster this
    process starts and stops."""
    names = [n.strip() for n in args.faults.split(",") if n.strip()]
    unknown = [n for n in names if n not in bench_faults.FAULTS]
    if unknown or args.kafka_brokers < 3 or args.kafka_controllers < 0:
        print(f"reports-pipeline bench: --faults: unknown {', '.join(unknown)} (known:"
              f" {', '.join(bench_faults.FAULTS)})" if unknown else
              "reports-pipeline bench: --kafka-brokers needs 3 nodes or more"
              if args.kafka_brokers < 3 else
              "reports-pipeline bench: --kafka-controllers takes 0 or more", file=sys.stderr)
        return 2
    config = dict(item.partition("=")[::2] for item in args.kafka_config)
    if any(not k or not v for k, v in config.items()):
        print("reports-pipeline bench: --kafka-config takes KEY=VALUE", file=sys.stderr)
        return 2
    base = args.data_dir or Path(tempfile.mkdtemp(prefix="reports-faults-"))

    async def faults() -> Report:
        cluster = KafkaCluster(base / "kafka", brokers=args.kafka_brokers,
                               controllers=args.kafka_controllers, config=config,
                               progress=_progress_line)
        await cluster.start()
        print(f"-- Kafka: {args.kafka_brokers} brokers, "
              + (f"{args.kafka_controllers} controllers of their own" if args.kafka_controllers
                 else "each a controller too"), flush=True)
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
             "soak_minutes": args.soak_minutes,
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
            if row.soak:
                print(f"\n{name}, {row.size:,} reports, sustained, per minute:\n"
                      + bench_soak.table(row.soak))
        print(f"\n{name}: " + bench_scale.verdicts(api_rows))
    args.output.write_bytes(orjson.dumps(bench_scale.to_json(options, rows),
                                         option=orjson.OPT_INDENT_2))
    print(f"figures written to {args.output}")
    return 0


def _bench_fleet(args: argparse.Namespace) -> int:
    """``bench --fleet``: the fleet's figures."""
    options = FleetOptions(clusters=args.fleet_clusters, rate=args.fleet_rate,
                           simulated_clusters=args.fleet_simulated,
                           simulated_reports=args.fleet_simulated_reports)
    if args.quick:
        options = replace(options, clients=4, seconds=30.0, resources=100,
                          simulated_clusters=min(options.simulated_clusters, 10),
                          simulated_reports=min(options.simulated_reports, 1000))
    if args.duration is not None:
        options = replace(options, seconds=args.duration)
    work = args.data_dir or Path(tempfile.mkdtemp(prefix="reports-fleet-"))
    try:
        report, code = _run_bench(bench_fleet.run(options, work, _progress_line))
    finally:
        if args.data_dir is None:
            shutil.rmtree(work, ignore_errors=True)
    if report is None:
        return code
    print(report.table())
    written = write_json(report, args.output)
    print("figures written to " + " and ".join(str(p) for p in written))
    return 0


def _bench(args: argparse.Namespace) -> int:
    if args.kafka_brokers:
        return _bench_faults(args)
    if args.fleet:
        return _bench_fleet(args)
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
