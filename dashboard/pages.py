"""The dashboard's HTML: one page per view, with the filters as a GET form (so
the URL holds them) and a few lines of script that submit the form on change
and refresh the page's content in place. Pure."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from html import escape
from typing import Any

from dashboard.filters import BUCKETS, RANGES, SEVERITIES, Filters

PAGES = {"overview": ("/", "Overview"), "trends": ("/trends", "Trends"),
         "resources": ("/resources", "Resources"), "findings": ("/findings", "Findings"),
         "fleet": ("/fleet", "Fleet")}

STYLE = """
body{font:14px/1.4 system-ui,sans-serif;margin:0;color:#222;background:#fafafa}
header{background:#1d2b3a;color:#fff;padding:8px 16px;display:flex;gap:24px;align-items:center}
header a{color:#cfe0f5;text-decoration:none}header a.on{color:#fff;font-weight:600}
header .brand{font-weight:700}
form.filters{display:flex;flex-wrap:wrap;gap:12px;padding:10px 16px;background:#eef2f6;
border-bottom:1px solid #d8dee6}form.filters label{display:flex;flex-direction:column;
font-size:12px;color:#555}
main{padding:12px 16px}section{background:#fff;border:1px solid #e2e6ea;border-radius:6px;
padding:10px 14px;margin-bottom:14px}h2{font-size:15px;margin:0 0 8px}
table{border-collapse:collapse;min-width:300px}th,td{padding:3px 10px;text-align:left;
border-bottom:1px solid #eee}td.n,th.n{text-align:right;font-variant-numeric:tabular-nums}
th a{color:#1d4f8a;text-decoration:none}.cards{display:flex;gap:12px;flex-wrap:wrap}
.card{border:1px solid #e2e6ea;border-radius:6px;padding:8px 12px;background:#fff}
.card .v{font-size:22px;font-weight:600}.fail{color:#c62828}.pass{color:#2e7d32}
.warn{color:#ef6c00}.error{color:#6a1b9a}.skip{color:#607d8b}
.grid{stroke:#eee}.axis{stroke:#999}.tick{font-size:11px;fill:#666}.empty{fill:#999}
rect.new{fill:#d62728}rect.resolved{fill:#2ca02c}.legend{list-style:none;padding:0;
columns:2}.legend span{display:inline-block;width:12px;height:3px;margin-right:6px;
vertical-align:middle}.row{display:flex;gap:14px;flex-wrap:wrap}.muted{color:#777}
.error-box{background:#fdecea;border:1px solid #f5c2c0;padding:10px;border-radius:6px}
"""

SCRIPT = """
document.querySelectorAll('form.filters select, form.filters input').forEach(el =>
  el.addEventListener('change', () => el.form.requestSubmit()));
const every = Number(document.body.dataset.refresh || 0);
if (every > 0) {
  setInterval(async () => {
    const r = await fetch(location.href, {headers: {'X-Dashboard-Fragment': '1'}});
    if (r.ok) {
      document.getElementById('content').innerHTML = await r.text();
      document.body.dataset.refreshed = String(Date.now());
    }
  }, every * 1000);
}
"""


@dataclass
class Choices:
    """What the filter form offers."""
    clusters: list[str] = field(default_factory=list)
    namespaces: list[str] = field(default_factory=list)
    policies: list[str] = field(default_factory=list)


def _select(name: str, current: str, options: Sequence[str], *, blank: str | None = "all"
            ) -> str:
    opts = [] if blank is None else [f'<option value=""{"" if current else " selected"}>'
                                     f"{escape(blank)}</option>"]
    values = list(options)
    if current and current not in values:
        values.insert(0, current)
    for v in values:
        sel = " selected" if v == current else ""
        opts.append(f'<option value="{escape(v)}"{sel}>{escape(v or "(cluster)")}</option>')
    return (f'<label>{name}<select name="{name}">{"".join(opts)}</select></label>')


def filter_form(page: str, f: Filters, choices: Choices) -> str:
    path = PAGES[page][0]
    parts = [_select("cluster", f.cluster, choices.clusters),
             _select("namespace", f.namespace, choices.namespaces),
             _select("policy", f.policy, choices.policies)]
    if page in ("resources",):
        parts.append(_select("severity", f.severity, SEVERITIES, blank="high + critical"))
    if page in ("overview", "trends", "resources", "fleet"):
        parts.append(_select("range", f.range, list(RANGES), blank=None))
    if page == "trends":
        parts.append(_select("bucket", f.bucket, list(BUCKETS), blank="auto"))
        parts.append(_select("rank", f.rank, ["count", "change"], blank=None))
    if page in ("trends", "resources", "fleet"):
        parts.append(f'<label>top<input type="number" name="top" min="1" max="50"'
                     f' value="{f.top}"></label>')
    if page == "findings":
        parts.append(f'<label>score at least<input type="number" name="min_score" step="0.1"'
                     f' value="{f.min_score:g}"></label>')
    parts.append(f'<label>refresh (s)<input type="number" name="refresh" min="0" max="3600"'
                 f' value="{f.refresh}"></label>')
    return f'<form class="filters" method="get" action="{path}">{"".join(parts)}</form>'


def document(page: str, f: Filters, choices: Choices, content: str) -> str:
    nav = "".join(f'<a href="{path}?{escape(f.query_string(sort=""))}"'
                  f'{" class=on" if key == page else ""}>{title}</a>'
                  for key, (path, title) in PAGES.items())
    return ("<!doctype html><html lang=en><head><meta charset=utf-8>"
            f"<title>{PAGES[page][1]} - policy reports</title>"
            '<meta name="viewport" content="width=device-width, initial-scale=1">'
            f"<style>{STYLE}</style></head>"
            f'<body data-page="{page}" data-refresh="{f.refresh}">'
            f'<header><span class="brand">Policy reports</span>{nav}</header>'
            f"{filter_form(page, f, choices)}"
            f'<main id="content">{content}</main>'
            f"<script>{SCRIPT}</script></body></html>")


def error_content(message: str) -> str:
    return f'<div class="error-box" role="alert">{escape(message)}</div>'


@dataclass(frozen=True)
class Column:
    key: str
    title: str
    numeric: bool = False


def table(table_id: str, page: str, f: Filters, columns: Sequence[Column],
          rows: Sequence[Sequence[Any]], *,
          links: dict[int, Callable[[Sequence[Any]], str]] | None = None,
          sortable: bool = True) -> str:
    """Rows sorted as the URL says (``sort=key`` ascending, ``-key``
    descending); headers link to the other order."""
    keys = [c.key for c in columns]
    current = f.sort.lstrip("-") if f.sort.lstrip("-") in keys else ""
    ordered = list(rows)
    if sortable and current:
        i = keys.index(current)
        ordered.sort(key=lambda r: (r[i] is None, r[i]), reverse=f.sort.startswith("-"))
    head = []
    for c in columns:
        cls = ' class="n"' if c.numeric else ""
        if sortable:
            flip = c.key if f.sort == f"-{c.key}" else f"-{c.key}"
            mark = " ▾" if f.sort == f"-{c.key}" else (" ▴" if f.sort == c.key else "")
            head.append(f'<th{cls}><a href="{PAGES[page][0]}?{escape(f.query_string(sort=flip))}"'
                        f' data-sort="{c.key}">{escape(c.title)}{mark}</a></th>')
        else:
            head.append(f"<th{cls}>{escape(c.title)}</th>")
    body = []
    for r in ordered:
        cells = []
        for i, (c, v) in enumerate(zip(columns, r, strict=True)):
            text = escape(_fmt(v))
            if links and i in links:
                text = f'<a href="{escape(links[i](r))}">{text}</a>'
            cells.append(f'<td class="n">{text}</td>' if c.numeric else f"<td>{text}</td>")
        body.append(f"<tr>{''.join(cells)}</tr>")
    if not body:
        body.append(f'<tr><td colspan="{len(columns)}" class="muted">nothing here</td></tr>')
    return (f'<table id="{table_id}"><thead><tr>{"".join(head)}</tr></thead>'
            f'<tbody>{"".join(body)}</tbody></table>')


def _fmt(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:g}"
    if v == "":
        return "(cluster)"
    return str(v)


def stamp(t: int) -> str:
    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%d %H:%M:%S")
