"""Workflows of the waits and composition tests, run on real worker processes."""

import os
import random
import time

import durableflow
from durableflow import ChildExecutionError, WaitTimeout
from tests.testapp.models import Marker


def _jitter(tag: str, limit: float) -> float:
    """Say the delivery runs (a test times its publication from that), then pause a while."""
    Marker.hit(tag)
    pause = random.uniform(0, limit)
    time.sleep(pause)
    return pause


@durableflow.workflow("t.wait-event")
def wait_event(ctx, params):
    if params.get("nap"):
        ctx.step.sleep("nap", params["nap"])
    return ctx.step.wait_for_event("event", params.get("type", "t.event"), match=params.get("match"))


@durableflow.workflow("t.race")
def race(ctx, params):
    ctx.step.run("jitter", _jitter, params["n"], params.get("jitter", 0.005))
    return ctx.step.wait_for_event("event", "t.race", match={"n": params["n"]})


@durableflow.workflow("t.signals")
def signals(ctx, params):
    ctx.step.sleep("nap", params.get("nap", 0))
    return [ctx.step.wait_for_signal(f"s{i}", "next") for i in range(3)]


@durableflow.workflow("t.token")
def token(ctx, params):
    return ctx.step.wait_for_token("approve")


@durableflow.workflow("t.wait-timeout")
def wait_timeout(ctx, params):
    t0 = ctx.step.run("t0", time.time)
    try:
        ctx.step.wait_for_event("never", "t.never", timeout=params["timeout"])
    except WaitTimeout as exc:
        t1 = ctx.step.run("t1", time.time)
        return {"code": exc.code, "waited": t1 - t0}
    return {"code": None}


def _double(n: int, fail: bool) -> int:
    if fail:
        raise LookupError(f"child {n} failed on purpose")
    return n * 2


@durableflow.workflow("t.double")
def double(ctx, params):
    return ctx.step.run("double", _double, params["n"], params.get("fail", False))


@durableflow.workflow("t.invoke")
def invoke(ctx, params):
    try:
        return {"value": ctx.step.invoke("child", "t.double", params)}
    except ChildExecutionError as exc:
        return {"status": exc.status, "message": exc.error["message"], "code": exc.code}


@durableflow.workflow("t.fan-children")
def fan_children(ctx, params):
    ids = []
    for i in range(params["n"]):
        ids.append(ctx.step.start(f"start-{i}", "t.double", {"n": i}))
        if i % 4 == 3:
            ctx.step.sleep(f"pause-{i}", 0.01)  # a new delivery: everything before replays
            ctx.step.run(f"replay-{i}", lambda: None)
    return [ctx.step.wait_for_execution(f"wait-{i}", pk) for i, pk in enumerate(ids)]


def map_item(item: dict) -> list:
    """One item: hold a while (so that a test can kill its worker), return [n, pid]."""
    if item.get("tag"):
        Marker.hit(f"{item['tag']}:{item['n']}")
    time.sleep(item.get("hold", 0))
    return [item["n"], os.getpid()]


@durableflow.workflow("t.map")
def map_wf(ctx, params):
    items = [{"n": n, "hold": params.get("hold", 0), "tag": params.get("tag")} for n in range(params["n"])]
    return ctx.step.map("items", map_item, items, max_concurrency=params.get("limit"))


@durableflow.workflow("t.continue")
def continue_wf(ctx, params):
    i = params["i"]
    for _ in range(params["every"]):
        i = ctx.step.run(f"s{i}", lambda i=i: i + 1)
    if i < params["until"]:
        ctx.continue_as_new({**params, "i": i})
    return i


@durableflow.workflow("t.wait-signal")
def wait_signal(ctx, params):
    return ctx.step.wait_for_signal("go", "go")


@durableflow.workflow("t.on-event", on_event="t.created")
def on_event(ctx, params):
    return {"got": params}


@durableflow.workflow("t.invoke-crash")
def invoke_crash(ctx, params):
    """Invokes ``t.crash``: its slow step holds while it runs inside this delivery."""
    return ctx.step.invoke("child", "t.crash", params)
