"""A serving process's runtime: uvloop, the collector's thresholds and the
interpreter's switch interval, set before the process's main coroutine runs."""

import asyncio
import gc
import sys

import pytest
import uvloop

from launcher.serving import GC_THRESHOLDS, SWITCH_INTERVAL_S, freeze_startup, serve


@pytest.fixture
def restored():
    thresholds, interval = gc.get_threshold(), sys.getswitchinterval()
    yield
    gc.set_threshold(*thresholds)
    sys.setswitchinterval(interval)


def test_serve_runs_main_on_uvloop_with_the_serving_settings(restored):
    seen = {}

    async def main() -> None:
        seen["loop"] = type(asyncio.get_running_loop())
        seen["thresholds"] = gc.get_threshold()
        seen["interval"] = sys.getswitchinterval()

    serve(main())
    assert seen["loop"] is uvloop.Loop
    assert seen["thresholds"] == GC_THRESHOLDS
    assert seen["interval"] == pytest.approx(SWITCH_INTERVAL_S)
    assert SWITCH_INTERVAL_S < 0.005  # shorter than CPython's default


def test_what_a_started_process_holds_is_left_out_of_full_collections():
    held = [{"n": i} for i in range(1000)]  # what start-up built
    try:
        freeze_startup()
        assert gc.get_freeze_count() >= len(held)
        assert not any(o is held for o in gc.get_objects())  # not walked again
        later = [{}]
        assert any(o is later for o in gc.get_objects())  # what comes after is
    finally:
        gc.unfreeze()
