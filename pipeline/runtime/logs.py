"""Logging helpers shared by the adapters."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator


@contextlib.contextmanager
def quiet(*names: str) -> Iterator[None]:
    """Silence the loggers ``names`` (below CRITICAL) for a first connection
    whose failure is raised as one error that says it all: the clients log
    each failed attempt on their own first."""
    loggers = [logging.getLogger(name) for name in names]
    levels = [logger.level for logger in loggers]
    for logger in loggers:
        logger.setLevel(logging.CRITICAL)
    try:
        yield
    finally:
        for logger, level in zip(loggers, levels, strict=True):
            logger.setLevel(level)
