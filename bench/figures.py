"""Figures of a benchmark run: each with its unit, its target, and whether it
met it; printed as a table and written as JSON. Pure."""

from __future__ import annotations

import operator
import re
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

COMPARE: dict[str, Callable[[float, float], bool]] = {
    ">=": operator.ge, "<": operator.lt, "<=": operator.le}


def percentile(values: Sequence[float], q: float) -> float:
    """The q-th percentile (0-100), nearest-rank; NaN for no values."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    rank = max(1, min(len(ordered), int(-(-q * len(ordered) // 100))))
    return ordered[rank - 1]


def by_second(timed: Sequence[tuple[float, float]], q: float) -> list[float]:
    """The q-th percentile of the values of each second, from (seconds since
    the start, value) pairs; a second without values is left out. Whether a
    tail is spread over a phase or comes from a few bad seconds."""
    seconds: dict[int, list[float]] = {}
    for at, value in timed:
        seconds.setdefault(int(at), []).append(value)
    return [percentile(values, q) for _, values in sorted(seconds.items())]


def sampled(page: str, name: str, labelled: str = "") -> float:
    """The sum of a /metrics page's samples of ``name`` (with ``labelled``
    among their labels, when given); 0 when there is none."""
    return sum(float(line.rsplit(" ", 1)[1]) for line in page.splitlines()
               if line.startswith((name + " ", name + "{")) and labelled in line)


_LE = re.compile(r'le="([^"]+)"')


def histogram_percentile(before: str, after: str, name: str, q: float) -> float | None:
    """The q-th percentile of what the /metrics histogram ``name`` counted
    between two pages, as the upper bound of the bucket it falls in (so
    "at most"; infinity past the last bound); None when it counted nothing."""
    def buckets(page: str) -> dict[float, float]:
        out: dict[float, float] = {}
        for line in page.splitlines():
            if line.startswith(name + "_bucket{") and (found := _LE.search(line)):
                bound = float(found.group(1))
                out[bound] = out.get(bound, 0.0) + float(line.rsplit(" ", 1)[1])
        return out
    earlier, later = buckets(before), buckets(after)
    counted = sorted((bound, n - earlier.get(bound, 0.0)) for bound, n in later.items())
    if not counted or counted[-1][1] <= 0:
        return None
    wanted = counted[-1][1] * q / 100
    return next(bound for bound, n in counted if n >= wanted)


@dataclass(frozen=True)
class Figure:
    name: str
    value: float
    unit: str
    target: tuple[str, float] | None = None
    note: str = ""

    @property
    def met(self) -> bool | None:
        if self.target is None:
            return None
        op, bound = self.target
        return COMPARE[op](self.value, bound)

    def to_json(self) -> dict[str, Any]:
        out = asdict(self)
        out["target"] = ({"op": self.target[0], "value": self.target[1]}
                         if self.target else None)
        out["met"] = self.met
        return out


def number(value: float) -> str:
    """A figure's value as the tables print it."""
    if value != value:  # NaN
        return "n/a"
    if abs(value) >= 100:
        return f"{value:,.0f}"
    if abs(value) >= 10:
        return f"{value:.1f}"
    return f"{value:.3g}"


@dataclass
class Report:
    figures: list[Figure] = field(default_factory=list)
    context: dict[str, Any] = field(default_factory=dict)
    #: rows beside the figures (the soak phase's minutes), each under its own
    #: key of the JSON
    series: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    #: the frontend's /metrics page at the end of the run (Prometheus text)
    metrics_page: str = ""

    def add(self, name: str, value: float, unit: str, target: tuple[str, float] | None = None,
            note: str = "") -> Figure:
        figure = Figure(name, float(value), unit, target, note)
        self.figures.append(figure)
        return figure

    def table(self) -> str:
        rows = [("FIGURE", "VALUE", "TARGET", "MET", "NOTE")]
        for f in self.figures:
            target = f"{f.target[0]} {number(f.target[1])} {f.unit}" if f.target else ""
            met = {True: "yes", False: "NO", None: ""}[f.met]
            rows.append((f.name, f"{number(f.value)} {f.unit}", target, met, f.note))
        widths = [max(len(r[i]) for r in rows) for i in range(4)]
        return "\n".join("  ".join([*(c.ljust(w) for c, w in zip(r[:4], widths, strict=True)),
                                    r[4]]).rstrip() for r in rows)

    def to_json(self) -> dict[str, Any]:
        return {"context": self.context, "figures": [f.to_json() for f in self.figures],
                **self.series}
