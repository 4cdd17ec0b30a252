"""A workflow that streams tokens slowly, for the live stream tests (and the admin's panel)."""

import time

import durableflow
from tests.testapp.models import Marker


def _tokens(tag: str, n: int, pause: float):
    Marker.hit(f"{tag}:streaming")  # which process makes them (a test may kill it)
    for i in range(1, n + 1):
        if pause:
            time.sleep(pause)
        yield f"token {i}"


@durableflow.workflow("t.stream")
def stream(ctx, params):
    ctx.stream("log").write("started")
    count = ctx.step.stream("tokens", "tokens", _tokens(params.get("tag", ""), params["n"], params.get("pause", 0)))
    ctx.stream("log").write({"tokens": count})
    return count
