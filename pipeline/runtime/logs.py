"""Logging helpers shared by the adapters."""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Iterator

#: per logger silenced by ``quiet``: how many scopes hold it, and its level before
_SILENCED: dict[str, tuple[int, int]] = {}
_LOCK = threading.Lock()  # scopes in the event loop and in worker threads


@contextlib.contextmanager
def quiet(*names: str) -> Iterator[None]:
    """Silence the loggers ``names`` (below CRITICAL) for a first connection
    whose failure is raised as one error that says it all: the clients log
    each failed attempt on their own first. Scopes may overlap (tasks
    connecting at once): the level before the first is restored after the
    last."""
    with _LOCK:
        for name in names:
            held, level = _SILENCED.get(name, (0, logging.getLogger(name).level))
            _SILENCED[name] = (held + 1, level)
            logging.getLogger(name).setLevel(logging.CRITICAL)
    try:
        yield
    finally:
        with _LOCK:
            for name in names:
                held, level = _SILENCED[name]
                if held == 1:
                    del _SILENCED[name]
                    logging.getLogger(name).setLevel(level)
                else:
                    _SILENCED[name] = (held - 1, level)
