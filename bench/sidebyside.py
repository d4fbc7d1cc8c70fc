"""The figures the benchmark measures the same way on every Kubernetes API it
drives (this system, the etcd-CRD baseline, any ``--against`` kubeconfig),
and the table that sets them side by side with their ratios. The phases:
seed the workload's reports, mixed traffic at a few and at many clients (writes/s,
write and GET latency, the servers' CPU per write), create the list namespace's
reports, LIST them whole and by pages, the servers' memory and bytes on disk
at rest, then the sustained phase."""

from __future__ import annotations

import contextlib
import math
import re
import statistics
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

import psutil

from bench.client import Client
from bench.figures import Figure, Report, number, percentile
from bench.soak import cpu_seconds
from bench.traffic import Driver, Run, closed_loop, polr_collection
from kubeclient import APIConflictError, APINotFoundError
from reportsamples.reports import Resource

MiB = 1024 * 1024
PAGE = 500


@dataclass(frozen=True)
class Compared:
    key: str
    label: str
    unit: str
    #: the ratio this system must reach over the etcd-CRD baseline
    target: tuple[str, float] | None = None


def compared(clients: Sequence[int], list_size: int) -> list[Compared]:
    few, many = min(clients), max(clients)
    out = []
    for n in sorted(set(clients)):
        out.append(Compared(f"writes@{n}", f"writes/s, {n} clients", "writes/s", (">=", 2)))
    out += [
        Compared(f"write_p50@{few}", f"write p50, {few} clients", "ms"),
        Compared(f"write_p99@{few}", f"write p99, {few} clients", "ms", ("<=", 0.5)),
        *([Compared(f"write_p99@{many}", f"write p99, {many} clients", "ms", ("<=", 0.5))]
          if many != few else []),
        Compared(f"get_p50@{few}", f"GET p50, {few} clients", "ms"),
        Compared(f"get_p99@{few}", f"GET p99, {few} clients", "ms", ("<=", 0.5)),
        Compared("cpu_per_write", "server CPU per write", "ms", ("<=", 0.5)),
        Compared("create", f"create {list_size:,} reports, {few} clients", "s"),
        Compared("list", f"LIST {list_size:,}", "s", ("<=", 0.5)),
        Compared("list_paged", f"LIST {list_size:,} by pages of {PAGE}", "s", ("<=", 0.5)),
        Compared("rss", "servers' RSS at the end", "MiB", ("<=", 1)),
        Compared("disk", "bytes on disk at rest", "MiB", ("<=", 1))]
    for n in sorted(set(clients)):
        out.append(Compared(f"sustained@{n}", f"writes/s sustained, {n} clients", "writes/s",
                            (">=", 2)))
    # the tails again over minutes of traffic: a 10-s phase has a few hundred GETs,
    # so its p99 is their fourth slowest
    for n in sorted(set(clients)):
        out += [Compared(f"sustained_write_p99@{n}", f"write p99 sustained, {n} clients", "ms",
                         ("<=", 0.5)),
                Compared(f"sustained_get_p99@{n}", f"GET p99 sustained, {n} clients", "ms",
                         ("<=", 0.5))]
    return out


@dataclass
class Measured:
    """What one API did in the compared phases."""

    name: str
    values: dict[str, float] = field(default_factory=dict)
    notes: dict[str, str] = field(default_factory=dict)
    #: every phase's run, by name (seed, mixed@N, create, sustained@N)
    runs: dict[str, Run] = field(default_factory=dict)

    def written(self) -> tuple[int, int]:
        """Bytes of report JSON and versions the phases wrote."""
        return (sum(r.bytes_written for r in self.runs.values()),
                sum(r.versions_written for r in self.runs.values()))

    def set(self, key: str, value: float, note: str = "") -> None:
        self.values[key] = value
        if note:
            self.notes[key] = note


@dataclass
class Servers:
    """The processes that serve an API (their children included), for CPU and
    memory; none when they are not on this machine."""

    roots: Callable[[], list[psutil.Process]]

    def tree(self) -> list[psutil.Process]:
        out = []
        for root in self.roots():
            out.append(root)
            try:
                out.extend(root.children(recursive=True))
            except psutil.Error:
                continue
        return out

    def cpu(self) -> dict[int, float]:
        times = {}
        for p in self.tree():
            try:
                times[p.pid] = cpu_seconds(p)
            except psutil.Error:
                continue
        return times

    def rss(self) -> int:
        total = 0
        for p in self.tree():
            try:
                total += p.memory_info().rss
            except psutil.Error:
                continue
        return total


@dataclass
class Api:
    """One API under test and what is known of it beyond its kubeconfig."""

    name: str
    servers: Servers | None
    #: bytes on disk and what they are; None when not on this machine
    disk: Callable[[], tuple[int, str]] | None
    #: waits until what was written is fully taken in (this system: ClickHouse
    #: holds every change), so a phase does not pay for the one before
    settle: Callable[[Client], Awaitable[None]]
    #: the workload's namespaces must exist first (a cluster's API; this
    #: system alone serves no namespaces)
    namespaces: bool = True
    #: its /metrics has reports_write_stage_seconds: where a write's time goes
    #: is measured over each mixed phase
    stages: bool = False


Phase = Callable[[Client, Driver, "Measured"], Awaitable[None]]


async def _nothing(client: Client, driver: Driver, measured: Measured) -> None:
    return None


async def measure(api: Api, client: Client, driver: Driver, *, pool: list[Resource],
                  listed: list[Resource], clients: Sequence[int], duration: float,
                  list_runs: int, soak: Callable[[int], Awaitable[Run | None]],
                  between: Phase = _nothing, before_sustained: Phase = _nothing,
                  progress: Callable[[str], None] = print) -> Measured:
    """The compared phases on ``api``. ``between`` runs after the mixed
    traffic, before the large namespace is created (this system's own latency
    and watch phases); ``before_sustained`` after the LISTs and the figures at
    rest; ``soak(clients)`` is the sustained phase."""
    out = Measured(api.name)
    if api.namespaces:
        for namespace in sorted({r.namespace for r in [*pool, *listed]}):
            # 404: an API without namespaces (this system's frontend itself)
            with contextlib.suppress(APINotFoundError, APIConflictError):
                await client.create("/api/v1/namespaces", {
                    "apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})
    progress(f"{api.name}: seeding {len(pool)} workload reports")
    out.runs["seed"] = await closed_loop(driver, pool, concurrency=max(clients), seed=True)
    await api.settle(client)
    cpu_seconds, writes = 0.0, 0
    for n in sorted(set(clients)):
        progress(f"{api.name}: mixed traffic ({driver.mix}), {n} clients, {duration:g} s")
        before = api.servers.cpu() if api.servers else {}
        page = await _metrics(client) if api.stages else ""
        run = out.runs[f"mixed@{n}"] = await closed_loop(driver, pool, concurrency=n,
                                                          duration=duration)
        if api.stages:
            for stage, ms in stage_means(page, await _metrics(client)).items():
                out.set(f"stage:{stage}@{n}", ms)
        if api.servers:
            after = api.servers.cpu()
            cpu_seconds += sum(after[pid] - before.get(pid, 0.0) for pid in after)
        done = run.writes()
        writes += len(done)
        errors = f"; errors {dict(run.errors)}" if run.errors else ""
        out.set(f"writes@{n}", len(done) / run.seconds,
                f"{len(run.reads()) / run.seconds:.0f} reads/s alongside{errors}")
        out.set(f"write_p50@{n}", percentile(done, 50) * 1000)
        out.set(f"write_p99@{n}", percentile(done, 99) * 1000, f"{len(done)} writes")
        gets = run.latencies.get("get", [])
        out.set(f"get_p50@{n}", percentile(gets, 50) * 1000)
        out.set(f"get_p99@{n}", percentile(gets, 99) * 1000, f"{len(gets)} GETs")
        await api.settle(client)
    if api.servers:
        out.set("cpu_per_write", cpu_seconds / max(writes, 1) * 1000,
                f"{cpu_seconds:.0f} CPU-s of the servers over {writes} writes (and the reads"
                " alongside) in the mixed phases")
    await between(client, driver, out)

    few = min(clients)
    progress(f"{api.name}: creating {len(listed):,} reports in one namespace, {few} clients")
    created = out.runs["create"] = await closed_loop(driver, listed, concurrency=few, seed=True)
    errors = f"; errors {dict(created.errors)}" if created.errors else ""
    out.set("create", created.seconds,
            f"{len(created.writes()) / created.seconds:.0f} creates/s{errors}")
    await api.settle(client)

    namespace = listed[0].namespace
    progress(f"{api.name}: LIST of {len(listed):,} reports, whole and by pages of {PAGE}")
    whole, paged, size = [], [], 0
    for _ in range(list_runs):
        got = await client.list_timed(polr_collection(namespace))
        whole.append(got.seconds)
        size = got.size
        paged.append(await _paged(client, polr_collection(namespace)))
    out.set("list", statistics.median(whole),
            f"{size / MiB:.0f} MiB of JSON, median of {len(whole)}")
    out.set("list_paged", statistics.median(paged), f"median of {len(paged)}")

    if api.servers:
        out.set("rss", api.servers.rss() / MiB, ", ".join(
            f"{_name(p)} {p.memory_info().rss / MiB:.0f}" for p in api.servers.tree()))
    if api.disk:
        size_on_disk, what = api.disk()
        out.set("disk", size_on_disk / MiB, what)

    await before_sustained(client, driver, out)
    for n in sorted(set(clients)):
        sustained = await soak(n)
        if sustained is not None:
            out.runs[f"sustained@{n}"] = sustained
            done = sustained.writes()
            p99 = percentile(done, 99) * 1000
            minutes = sustained.per_minute()
            each = (f", each minute {min(minutes):.0f}-{max(minutes):.0f} writes/s"
                    if len(minutes) > 1 else "")
            out.set(f"sustained@{n}", len(done) / sustained.seconds,
                    f"{sustained.seconds / 60:.1f} min, write p99 {p99:.0f} ms{each}")
            gets = sustained.latencies.get("get", [])
            out.set(f"sustained_write_p99@{n}", p99, f"{len(done)} writes")
            out.set(f"sustained_get_p99@{n}", percentile(gets, 99) * 1000, f"{len(gets)} GETs")
    return out


async def _metrics(client: Client) -> str:
    return await client.text("/metrics")


#: the verbs that write, as apiserver_request_duration_seconds names them
WRITE_VERBS = ("create", "update", "patch", "delete")


def stage_means(before: str, after: str) -> dict[str, float]:
    """Mean milliseconds per write in each stage between two /metrics pages:
    ``request`` (the whole request as the frontend times it) and stages that
    add up to it: ``frontend`` (the request less publishing it, awaiting its
    reply and the change in the cache), ``produce``, ``queue`` (after the
    produce), ``decide``, ``transaction``, ``reply`` (the commit's remainder:
    the reply's way back) and ``visible``. Pure."""
    def sums(page: str) -> dict[str, tuple[float, float]]:
        out: dict[str, list[float]] = {}
        for m in re.finditer(r'^(reports_write_stage_seconds|apiserver_request_duration_seconds)'
                             r'_(sum|count)\{([^}]*)\} (\S+)$', page, re.M):
            labels = dict(re.findall(r'(\w+)="([^"]*)"', m[3]))
            if m[1] == "reports_write_stage_seconds":
                key = labels["stage"]
            elif labels.get("verb") in WRITE_VERBS:
                key = "request"
            else:
                continue
            pair = out.setdefault(key, [0.0, 0.0])
            pair[0 if m[2] == "sum" else 1] += float(m[4])
        return {k: (v[0], v[1]) for k, v in out.items()}
    start, end = sums(before), sums(after)
    means: dict[str, float] = {}
    for key, (total, count) in end.items():
        t0, c0 = start.get(key, (0.0, 0.0))
        if count > c0:
            means[key] = (total - t0) / (count - c0) * 1000
    if {"request", "produce", "commit", "visible"} <= means.keys():
        means["frontend"] = means["request"] - means["produce"] - means["commit"] \
            - means["visible"]
    if {"commit", "produce", "queue", "decide", "transaction"} <= means.keys():
        # the queue is timed from the request's send, so it holds the produce
        # call: without it, and with the reply's way back (what remains of the
        # commit), the stages add up to the request
        means["reply"] = means["commit"] + means["produce"] - means["queue"] \
            - means["decide"] - means["transaction"]
        means["queue"] -= means["produce"]
    return means


def _name(p: psutil.Process) -> str:
    try:
        name = p.name()
    except psutil.Error:
        return str(p.pid)
    return "broker" if name == "java" else name


async def _paged(client: Client, path: str) -> float:
    """Seconds to list ``path`` by pages of ``PAGE``: each page timed to its
    last byte, as the whole list is (the client's parsing is not timed)."""
    seconds, token = 0.0, ""
    while True:
        page = await client.list_timed(
            f"{path}?limit={PAGE}" + (f"&continue={quote(token)}" if token else ""))
        seconds += page.seconds
        token = page.continue_token
        if not token:
            return seconds


def ratio(ours: float, theirs: float) -> float:
    if math.isnan(ours) or math.isnan(theirs) or theirs == 0:
        return float("nan")
    return ours / theirs


def side_by_side(report: Report, rows: list[Compared], ours: Measured,
                 baseline: Measured | None, others: Sequence[Measured] = ()) -> None:
    """Each compared figure as a row of the report's ``side_by_side`` series:
    this system's value, the baseline's and the others', the ratio to the
    baseline, its target and whether it is met."""
    table = []
    for row in rows:
        if row.key not in ours.values:
            continue
        value = ours.values[row.key]
        base = baseline.values.get(row.key, float("nan")) if baseline else float("nan")
        entry: dict[str, Any] = {"figure": row.label, "unit": row.unit, ours.name: value,
                                 "notes": {ours.name: ours.notes.get(row.key, "")}}
        for other in ([baseline] if baseline else []) + list(others):
            entry[other.name] = other.values.get(row.key, float("nan"))
            entry["notes"][other.name] = other.notes.get(row.key, "")
        if baseline is not None:
            r = ratio(value, base)
            entry["ratio"] = r
            entry["target"] = {"op": row.target[0], "value": row.target[1]} \
                if row.target else None
            entry["met"] = Figure(row.label, r, "x", row.target).met \
                if row.target and not math.isnan(r) else None
        table.append(entry)
    report.series["side_by_side"] = table


def table(report: Report) -> str:
    """The side-by-side rows as a text table."""
    rows = report.series.get("side_by_side") or []
    if not rows:
        return ""
    names = [k for k in rows[0] if k not in ("figure", "unit", "notes", "ratio", "target", "met")]
    header = ["FIGURE", *(n.upper() for n in names), "RATIO", "TARGET", "MET"]
    lines = [header]
    for r in rows:
        target = r.get("target")
        lines.append([f"{r['figure']} ({r['unit']})", *(number(r.get(n, float("nan")))
                                                         for n in names),
                      number(r.get("ratio", float("nan"))) + "x" if "ratio" in r else "",
                      f"{target['op']} {target['value']:g}x" if target else "",
                      {True: "yes", False: "NO", None: ""}[r.get("met")]])
    widths = [max(len(line[i]) for line in lines) for i in range(len(header))]
    return "\n".join("  ".join(c.rjust(w) if 0 < i < len(header) - 2 else c.ljust(w)
                               for i, (c, w) in enumerate(zip(line, widths, strict=True))).rstrip()
                     for line in lines)

