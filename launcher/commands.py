"""Commands added to ``reports-pipeline`` by the installed distributions'
entry points (group ``reports_pipeline.commands``), never by an import: the
benchmark (``bench.cli``) is one, and the product runs without it.

An entry point names a :class:`Command`, and may name the extra whose
packages it needs (``bench = "bench.cli:COMMAND [bench]"``). When those are
not installed the command is still listed, and running it says in one line
which extra to install.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from importlib.metadata import entry_points
from typing import Protocol

GROUP = "reports_pipeline.commands"


class Command(Protocol):
    """A command of ``reports-pipeline``: the launcher makes its parser (named
    by the entry point), lets it add its arguments, and runs it."""

    @property
    def help(self) -> str:
        """Its line in ``reports-pipeline --help``."""
        ...

    @property
    def description(self) -> str:
        """The text of its own ``--help``."""
        ...

    def configure(self, parser: argparse.ArgumentParser) -> None:
        """Add its arguments to its parser."""
        ...

    def run(self, args: argparse.Namespace) -> int:
        """Run it with the parsed arguments; its exit code."""
        ...


@dataclass(frozen=True)
class Unavailable:
    """A command whose packages are not installed: whatever it is given, it
    says which extra to install."""

    name: str
    extra: str
    missing: str

    @property
    def help(self) -> str:
        return f"(not installed: pip install -e '.[{self.extra}]')"

    @property
    def description(self) -> str:
        return self.help

    def configure(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("words", nargs=argparse.REMAINDER)

    def run(self, args: argparse.Namespace) -> int:
        print(f"reports-pipeline {self.name}: needs the {self.extra} extra ({self.missing} is"
              f" not installed): pip install -e '.[{self.extra}]'", file=sys.stderr)
        return 1


def discovered() -> dict[str, Command]:
    """The installed commands by name, in the order of their names."""
    found: dict[str, Command] = {}
    for point in sorted(entry_points(group=GROUP), key=lambda p: p.name):
        try:
            found[point.name] = point.load()
        except ModuleNotFoundError as err:
            missing = err.name or str(err)
            if missing.partition(".")[0] == point.module.partition(".")[0]:
                raise  # the command's own module: a broken install, not a missing extra
            extra = point.extras[0] if point.extras else point.name
            found[point.name] = Unavailable(point.name, extra, missing.partition(".")[0])
    return found
