"""Child processes that do not outlive their parent (Linux)."""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import signal
import sys
from collections.abc import Callable


def die_with_parent() -> Callable[[], None] | None:
    """A pre-exec hook asking Linux to send the child SIGTERM when its parent
    dies, so a killed parent (``up``, the benchmark) leaves no child behind.
    libc is resolved here, in the parent; the child only makes the call."""
    if not sys.platform.startswith("linux"):
        return None
    prctl = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True).prctl
    pr_set_pdeathsig = 1
    parent = os.getpid()

    def hook() -> None:
        prctl(pr_set_pdeathsig, signal.SIGTERM, 0, 0, 0)
        if os.getppid() != parent:  # the parent died before the request took effect
            os._exit(1)
    return hook
