"""Failing counts over time per namespace and policy, on a fixed grid of
buckets: a series still failing but quiet in a bucket keeps its last known
count (carried forward, and carried in from before the range). Pure."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

Key = tuple[str, str]  # (namespace, policy)


@dataclass(frozen=True)
class Series:
    key: Key
    fail: list[int]  # one per bucket
    new: list[int]
    resolved: list[int]

    @property
    def last(self) -> int:
        return self.fail[-1] if self.fail else 0

    @property
    def change(self) -> int:
        """How far the count moved over the range (up or down)."""
        return self.fail[-1] - self.fail[0] if self.fail else 0

    @property
    def label(self) -> str:
        ns, policy = self.key
        return f"{ns or '(cluster)'} / {policy}"


def build(buckets: Sequence[int], rows: Iterable[Sequence[Any]],
          carried: Iterable[Sequence[Any]] = ()) -> list[Series]:
    """``rows``: (namespace, policy, bucket, fail, new, resolved) from
    ``filters.windows``; ``carried``: (namespace, policy, fail) from
    ``filters.carried_in``."""
    index = {b: i for i, b in enumerate(buckets)}
    n = len(buckets)
    seen: dict[Key, tuple[list[int | None], list[int], list[int]]] = {}

    def slot(key: Key) -> tuple[list[int | None], list[int], list[int]]:
        if key not in seen:
            seen[key] = ([None] * n, [0] * n, [0] * n)
        return seen[key]

    start: dict[Key, int] = {}
    for ns, policy, fail in carried:
        start[(ns, policy)] = int(fail)
        slot((ns, policy))
    for ns, policy, bucket, fail, new, resolved in rows:
        i = index.get(int(bucket))
        if i is None:
            continue
        fails, news, gone = slot((ns, policy))
        fails[i] = int(fail)
        news[i] += int(new)
        gone[i] += int(resolved)
    out = []
    for key, (fails, news, gone) in seen.items():
        filled, last = [], start.get(key, 0)
        for value in fails:
            last = value if value is not None else last
            filled.append(last)
        out.append(Series(key, filled, news, gone))
    return out


def ranked(series: Iterable[Series], *, top: int, by: str = "count") -> list[Series]:
    """The ``top`` series with the highest count now, or (``by="change"``)
    those whose count moved most over the range."""
    if by == "change":
        order = sorted(series, key=lambda s: (-abs(s.change), -s.last, s.key))
    else:
        order = sorted(series, key=lambda s: (-s.last, -max(s.fail, default=0), s.key))
    return [s for s in order if any(s.fail) or any(s.new) or any(s.resolved)][:top]


def total(series: Iterable[Series], width: int) -> list[int]:
    """Failing results of every series together, per bucket."""
    sums = [0] * width
    for s in series:
        for i, v in enumerate(s.fail):
            sums[i] += v
    return sums


def flows(series: Iterable[Series], width: int) -> tuple[list[int], list[int]]:
    """New and resolved failures of every series together, per bucket."""
    new, gone = [0] * width, [0] * width
    for s in series:
        for i in range(width):
            new[i] += s.new[i]
            gone[i] += s.resolved[i]
    return new, gone


@dataclass(frozen=True)
class Change:
    at: int
    policy: str
    rule: str
    report: str
    before: str  # "" for the first result seen
    after: str


def changes(rows: Iterable[Sequence[Any]], *, since: int) -> list[Change]:
    """When each result of a resource (per policy, rule and report) changed
    status, from its history rows (at, policy, rule, report, result) in time
    order per policy, rule and report; changes before ``since`` only set the
    status the range starts from."""
    out: list[Change] = []
    last: dict[tuple[str, str, str], str] = {}
    for at, policy, rule, report, result in rows:
        key = (policy, rule, report)
        before = last.get(key)
        if before != result:
            if int(at) >= since:
                out.append(Change(int(at), policy, rule, report, before or "", result))
            last[key] = result
    return sorted(out, key=lambda c: (-c.at, c.policy, c.rule))
