"""The clusters a fleet follows: from ``--source`` flags and a config file.
Pure: no I/O (the file's text is given).

A source is a cluster's name (the ``cluster`` of every row it yields, so two
clusters that both call themselves ``default`` stay apart), the bootstrap of
the Kafka that holds its public topics, and their prefix::

    clusters:
      - name: prod-eu
        bootstrap: kafka.prod-eu.example:9092
        prefix: reports          # the default
      - name: prod-us
        bootstrap: mirror.central.example:9092
        prefix: prod-us.reports  # mirrored by MirrorMaker 2 (docs/fleet.md)

or ``--source prod-eu=kafka.prod-eu.example:9092[/PREFIX]``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import yaml

DEFAULT_PREFIX = "reports"
#: a cluster's name: what a Kubernetes label value may be, as it names rows
NAME = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9._-]{0,61}[A-Za-z0-9])?$")


class SourceError(ValueError):
    """A source cannot be followed as given (a reason for the user)."""


@dataclass(frozen=True)
class Source:
    name: str
    bootstrap: str
    prefix: str = DEFAULT_PREFIX

    @property
    def changes_topic(self) -> str:
        return f"{self.prefix}.changes"

    @property
    def summaries_topic(self) -> str:
        return f"{self.prefix}.summaries"


def source(name: str, bootstrap: str, prefix: str = DEFAULT_PREFIX) -> Source:
    if not NAME.match(name):
        raise SourceError(f"cluster name {name!r}: letters, digits, '.', '_' and '-',"
                          " at most 63, starting and ending with a letter or digit")
    if not bootstrap or any(":" not in b for b in bootstrap.split(",")):
        raise SourceError(f"cluster {name}: bootstrap {bootstrap!r} is not HOST:PORT[,HOST:PORT]")
    if not prefix or "/" in prefix:
        raise SourceError(f"cluster {name}: topic prefix {prefix!r}")
    return Source(name, bootstrap, prefix)


def from_flag(text: str) -> Source:
    """``NAME=BOOTSTRAP[/PREFIX]``."""
    name, sep, rest = text.partition("=")
    if not sep:
        raise SourceError(f"--source {text!r}: expected NAME=BOOTSTRAP[/PREFIX]")
    bootstrap, _, prefix = rest.partition("/")
    return source(name.strip(), bootstrap.strip(), prefix.strip() or DEFAULT_PREFIX)


def from_config(text: str, where: str = "the config") -> list[Source]:
    """The ``clusters`` of a config file's YAML."""
    try:
        doc = yaml.safe_load(text) or {}
    except yaml.YAMLError as err:
        raise SourceError(f"{where}: not YAML: {err}") from err
    clusters = doc.get("clusters") if isinstance(doc, dict) else None
    if clusters is None:
        clusters = []
    if not isinstance(clusters, list):
        raise SourceError(f"{where}: 'clusters' must be a list")
    found = []
    for i, entry in enumerate(clusters):
        if not isinstance(entry, dict) or not {"name", "bootstrap"} <= entry.keys():
            raise SourceError(f"{where}: clusters[{i}] needs a name and a bootstrap")
        unknown = set(entry) - {"name", "bootstrap", "prefix"}
        if unknown:
            raise SourceError(f"{where}: clusters[{i}] has unknown keys {sorted(unknown)}")
        found.append(source(str(entry["name"]), str(entry["bootstrap"]),
                            str(entry.get("prefix") or DEFAULT_PREFIX)))
    return found


def combined(*groups: Iterable[Source]) -> list[Source]:
    """Every source once; a name given twice must name the same source."""
    by_name: dict[str, Source] = {}
    for group in groups:
        for s in group:
            if s.name in by_name and by_name[s.name] != s:
                raise SourceError(f"cluster {s.name} is given twice, differently")
            by_name[s.name] = s
    return list(by_name.values())


def changed(before: Sequence[Source], after: Sequence[Source]
            ) -> tuple[list[Source], list[Source]]:
    """(sources to start, sources to stop) going from ``before`` to ``after``:
    a source whose bootstrap or prefix changed is stopped and started again."""
    old, new = set(before), set(after)
    return [s for s in after if s not in old], [s for s in before if s not in new]
