"""Workflows with effects, run by real workers against the fake service (tests.testapp.service)."""

import os
import signal

import durableflow
from durableflow import WorkflowEffectError
from tests.testapp import service
from tests.testapp.models import Marker


def _charge(ctx, params, **change):
    descriptor = {
        "effect_id": params["effect_id"],
        "operation": params.get("operation", "test.charge/v1"),
        "input": {"cents": params.get("cents", 100)},
        "retry_in": params.get("retry_in", 1),
        "lookup": service.lookup,
        "perform": service.perform,
        **change,
    }
    return ctx.step.effect("charge", **descriptor)


@durableflow.workflow("t.effect")
def effect(ctx, params):
    receipt = _charge(ctx, params)
    if params.get("nap"):
        ctx.step.sleep("nap", params["nap"])
    return {"receipt": receipt, "pid": ctx.step.run("pid", os.getpid)}


_INVALID = {
    "empty-id": {"effect_id": ""},
    "negative-retry": {"retry_in": -1},
    "perform-not-callable": {"perform": "charge"},
    "input-not-durable": {"input": {"at": float("nan")}},
}


@durableflow.workflow("t.effect-catch")
def effect_catch(ctx, params):
    try:
        return {"receipt": _charge(ctx, params, **_INVALID.get(params.get("invalid"), {}))}
    except WorkflowEffectError as exc:
        return {"code": exc.code}


@durableflow.workflow("t.effect-pause")
def effect_pause(ctx, params):
    tag = params["tag"]
    ctx.step.run("before", Marker.hit, f"{tag}:before")
    # Between two steps, once: freeze this worker process until the test wakes it.
    if Marker.count(f"{tag}:paused") == 0:
        Marker.hit(f"{tag}:paused")
        os.kill(os.getpid(), signal.SIGSTOP)
    return {"receipt": _charge(ctx, params), "pid": ctx.step.run("pid", os.getpid)}


@durableflow.workflow("t.effect-loop")
def effect_loop(ctx, params):
    """``n`` effects with trivial callbacks, named ``<prefix>-<i>``: the protocol's own cost."""
    return [
        ctx.step.effect(
            f"e{i}",
            effect_id=f"{params['prefix']}-{i}",
            operation="test.noop/v1",
            input=i,
            retry_in=1,
            lookup=lambda effect_id: {"status": "not-found"},
            perform=lambda effect_id, i=i: i,
        )
        for i in range(params["n"])
    ]
