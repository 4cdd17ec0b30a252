"""Workflows whose step bodies run past their ``timeout=``, for tests/engine/test_timeouts.py."""

import time

import durableflow
from tests.testapp.models import Marker


def stuck(seconds: float) -> None:
    """Blocked in one C call: off the main thread, nothing can stop it before it returns."""
    time.sleep(seconds)


@durableflow.workflow("t.timeout-stuck")
def timeout_stuck(ctx, params):
    try:
        ctx.step.run("stuck", stuck, params["seconds"], timeout=params["timeout"])
    except durableflow.StepTimeout as exc:
        return exc.code
    return "returned"


def stubborn(tag: str, seconds: float) -> None:
    """Tries to swallow the interruption with ``except Exception``; marks where it got to."""
    Marker.hit(f"{tag}:started")
    try:
        until = time.monotonic() + seconds
        while time.monotonic() < until:
            try:
                time.sleep(0.1)
            except Exception:  # noqa: BLE001 - a body that swallows the interrupt
                Marker.hit(f"{tag}:swallowed")
        Marker.hit(f"{tag}:finished")
    finally:
        Marker.hit(f"{tag}:stopped")


@durableflow.workflow("t.timeout-stubborn")
def timeout_stubborn(ctx, params):
    try:
        ctx.step.run("stubborn", stubborn, params["tag"], params["seconds"], timeout=params["timeout"])
    except durableflow.StepTimeout as exc:
        return exc.code
    return "returned"
