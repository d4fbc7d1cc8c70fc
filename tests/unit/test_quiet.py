"""``quiet``: scopes that overlap (tasks connecting at once) leave the
logger's level as it was before the first."""

from __future__ import annotations

import logging

from pipeline.runtime.logs import quiet


def test_overlapping_scopes_restore_the_level_before_the_first() -> None:
    logger = logging.getLogger("tests.quiet")
    logger.setLevel(logging.WARNING)
    first, second = quiet("tests.quiet"), quiet("tests.quiet")
    first.__enter__()
    second.__enter__()
    assert logger.level == logging.CRITICAL
    first.__exit__(None, None, None)  # the first ends before the second
    assert logger.level == logging.CRITICAL
    second.__exit__(None, None, None)
    assert logger.level == logging.WARNING
