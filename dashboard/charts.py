"""Charts drawn by the server as SVG: a time axis ticked at whole minutes,
hours or days of the range shown, counts ticked at whole numbers. Pure."""

from __future__ import annotations

import math
from collections.abc import Sequence
from datetime import UTC, datetime
from html import escape

PALETTE = ("#d62728", "#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd", "#8c564b", "#e377c2",
           "#7f7f7f", "#bcbd22", "#17becf")
#: tick spacing candidates for a time axis, seconds
TIME_STEPS = (60, 300, 600, 900, 1800, 3600, 3 * 3600, 6 * 3600, 12 * 3600, 86400,
              2 * 86400, 5 * 86400, 7 * 86400)


def color(i: int) -> str:
    return PALETTE[i % len(PALETTE)]


def count_ticks(top: int, most: int = 5) -> list[int]:
    """Whole-number ticks from 0 covering ``top`` (1, 2 or 5 times a power of
    ten apart); never fractions, whatever the data."""
    top = max(1, top)
    raw = top / most
    power = 10 ** math.floor(math.log10(raw)) if raw >= 1 else 1
    step = next(m * power for m in (1, 2, 5, 10) if m * power >= raw)
    step = max(1, int(step))
    return list(range(0, -(-top // step) * step + 1, step))


def time_ticks(start: int, end: int, most: int = 8) -> list[int]:
    """Tick times within [start, end) at a whole step of the span."""
    span = max(1, end - start)
    step = next((s for s in TIME_STEPS if span / s <= most), TIME_STEPS[-1])
    first = -(-start // step) * step
    return list(range(first, end + 1, step))


def time_label(t: int, span: int) -> str:
    when = datetime.fromtimestamp(t, UTC)
    if span <= 86400:
        return when.strftime("%H:%M")
    if span <= 7 * 86400:
        return when.strftime("%m-%d %H:%M") if when.hour or when.minute else when.strftime("%m-%d")
    return when.strftime("%m-%d")


def line_chart(buckets: Sequence[int], bucket: int, lines: Sequence[tuple[str, Sequence[int]]],
               *, width: int = 880, height: int = 300, title: str = "") -> str:
    """Lines over time: ``buckets`` (epoch seconds, each ``bucket`` long) and
    (label, value per bucket) per line, in the palette's order."""
    left, right, top, bottom = 48, 16, 16, 28
    inner_w, inner_h = width - left - right, height - top - bottom
    start, end = (buckets[0], buckets[-1] + bucket) if buckets else (0, bucket)
    highest = max((v for _, vs in lines for v in vs), default=0)
    yticks = count_ticks(highest)
    ymax = yticks[-1]

    def x(t: float) -> float:
        return left + (t - start) / (end - start) * inner_w

    def y(v: float) -> float:
        return top + inner_h - v / ymax * inner_h

    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" class="chart" width="{width}"'
             f' height="{height}" viewBox="0 0 {width} {height}" role="img"'
             f' aria-label="{escape(title)}">']
    for v in yticks:
        parts.append(f'<line x1="{left}" x2="{width - right}" y1="{y(v):.1f}" y2="{y(v):.1f}"'
                     ' class="grid"/>')
        parts.append(f'<text x="{left - 6}" y="{y(v) + 4:.1f}" text-anchor="end"'
                     f' class="tick">{v}</text>')
    for t in time_ticks(start, end):
        parts.append(f'<line x1="{x(t):.1f}" x2="{x(t):.1f}" y1="{top}" y2="{top + inner_h}"'
                     ' class="grid"/>')
        parts.append(f'<text x="{x(t):.1f}" y="{height - 8}" text-anchor="middle"'
                     f' class="tick">{escape(time_label(t, end - start))}</text>')
    for i, (label, values) in enumerate(lines):
        # each value holds for its whole bucket: drawn at the bucket's middle
        points = " ".join(f"{x(b + bucket / 2):.1f},{y(v):.1f}"
                          for b, v in zip(buckets, values, strict=True))
        parts.append(f'<polyline class="series" data-label="{escape(label)}"'
                     f' data-last="{values[-1] if values else 0}" fill="none"'
                     f' stroke="{color(i)}" stroke-width="2" points="{points}">'
                     f'<title>{escape(label)}</title></polyline>')
    if not lines:
        parts.append(f'<text x="{width / 2}" y="{height / 2}" text-anchor="middle"'
                     ' class="empty">no failures in this range</text>')
    parts.append("</svg>")
    return "".join(parts)


def flow_bars(buckets: Sequence[int], bucket: int, new: Sequence[int], resolved: Sequence[int],
              *, width: int = 880, height: int = 180) -> str:
    """New failures (up, red) and resolved ones (down, green) per bucket."""
    left, right, top, bottom = 48, 16, 10, 28
    inner_w, inner_h = width - left - right, height - top - bottom
    start, end = (buckets[0], buckets[-1] + bucket) if buckets else (0, bucket)
    ticks = count_ticks(max([*new, *resolved, 0]), most=2)
    ymax = ticks[-1]
    mid = top + inner_h / 2
    scale = inner_h / 2 / ymax
    bar = max(1.0, inner_w / max(1, len(buckets)) * 0.8)
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" class="chart flows" width="{width}"'
             f' height="{height}" viewBox="0 0 {width} {height}" role="img"'
             ' aria-label="new and resolved failures">',
             f'<line x1="{left}" x2="{width - right}" y1="{mid}" y2="{mid}" class="axis"/>']
    for v in ticks[1:]:
        for sign in (1, -1):
            yy = mid - sign * v * scale
            parts.append(f'<text x="{left - 6}" y="{yy + 4:.1f}" text-anchor="end"'
                         f' class="tick">{"" if sign > 0 else "-"}{v}</text>')
    for b, n, r in zip(buckets, new, resolved, strict=True):
        xx = left + (b - start) / (end - start) * inner_w
        if n:
            parts.append(f'<rect class="new" x="{xx:.1f}" y="{mid - n * scale:.1f}"'
                         f' width="{bar:.1f}" height="{n * scale:.1f}"><title>{n} new</title>'
                         '</rect>')
        if r:
            parts.append(f'<rect class="resolved" x="{xx:.1f}" y="{mid:.1f}" width="{bar:.1f}"'
                         f' height="{r * scale:.1f}"><title>{r} resolved</title></rect>')
    for t in time_ticks(start, end):
        xx = left + (t - start) / (end - start) * inner_w
        parts.append(f'<text x="{xx:.1f}" y="{height - 8}" text-anchor="middle"'
                     f' class="tick">{escape(time_label(t, end - start))}</text>')
    parts.append("</svg>")
    return "".join(parts)


def sparkline(values: Sequence[int], *, width: int = 240, height: int = 40) -> str:
    top = max([*values, 1])
    n = max(1, len(values) - 1)
    points = " ".join(f"{i / n * (width - 4) + 2:.1f},{height - 2 - v / top * (height - 4):.1f}"
                      for i, v in enumerate(values))
    return (f'<svg xmlns="http://www.w3.org/2000/svg" class="sparkline" width="{width}"'
            f' height="{height}" viewBox="0 0 {width} {height}" role="img"'
            f' aria-label="failing results over the range">'
            f'<polyline fill="none" stroke="#d62728" stroke-width="1.5" points="{points}"/>'
            "</svg>")
