"""Workflows the admin tests show and steer (in-process and on real workers)."""

import time

import durableflow
from tests.testapp.models import Marker


def _hold(tag: str, seconds: float) -> str:
    """Stay in this step until the test releases it (or ``seconds`` pass): a run in progress."""
    Marker.hit(f"{tag}:holding")
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and not Marker.count(f"{tag}:release"):
        time.sleep(0.1)
    return "released"


def _work(seconds: float, value):
    time.sleep(seconds)  # a step that takes a while, so that the timeline has something to draw
    return value


@durableflow.workflow("t.admin-hold")
def hold(ctx, params):
    ready = ctx.step.run("prepare", lambda: {"order": params["tag"], "items": list(range(3))})
    ctx.step.run("reserve-stock", _work, 0.3, {"reserved": ready["items"]})
    ctx.step.sleep("cool-off", params.get("cool_off", 0))
    ctx.step.run("charge", _work, 0.2, {"charged_cents": 1250, "receipt": f"r-{params['tag']}"})
    held = ctx.step.run("hold", _hold, params["tag"], params.get("seconds", 60))
    done = ctx.step.run("finish", Marker.hit, f"{params['tag']}:finish")
    return {"ready": ready, "held": held, "done": done}


def _call_service(tag: str) -> dict:
    if not Marker.count(f"{tag}:fixed"):
        raise ValueError("the payment service said no")
    return {"charged": True}


@durableflow.workflow("t.admin-fail")
def fail(ctx, params):
    order = ctx.step.run("load", lambda: {"order": params["tag"], "cents": 1250})
    charge = ctx.step.run("charge", _call_service, params["tag"])
    return {"order": order, "charge": charge}
