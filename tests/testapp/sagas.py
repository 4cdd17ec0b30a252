"""Workflows for the saga tests on real workers: compensations, cancels, retry/rerun/fork, metadata.

Every body and compensation writes a ``Marker`` row, so that a test counts in the database
what ran, and in which order (rows are numbered).
"""

from __future__ import annotations

import time

import durableflow
from tests.testapp.models import Marker


def _hit(name: str, value=None):
    Marker.hit(name)
    return value if value is not None else name


def _undo(tag: str, step: str, hold: float = 0):
    """The compensation of ``step``: marked; held on its first run when ``hold`` (a test kills it there)."""

    def compensation(result):
        Marker.hit(f"{tag}:undo-{step}")
        if hold and Marker.count(f"{tag}:undo-{step}") == 1:
            time.sleep(hold)
        if step == "broken":
            raise RuntimeError("the refund service is down")

    return compensation


def _until_cancelled(tag: str, execution_id: str, timeout: float = 30) -> str:
    """A step body still running when the cancel lands: it returns once the cancel is recorded."""
    from durableflow.models import Execution

    Marker.hit(f"{tag}:slow")
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if Execution.objects.filter(pk=execution_id, cancel_requested__isnull=False).exists():
            break
        time.sleep(0.05)
    return "finished after the cancel"


def _fails_once(tag: str, step: str) -> str:
    Marker.hit(f"{tag}:{step}")
    if Marker.count(f"{tag}:{step}") == 1:
        raise LookupError(f"{step} failed on its first attempt")
    return step


def _no_car(tag: str):
    Marker.hit(f"{tag}:car")
    raise LookupError("no car left")


@durableflow.workflow("t.saga-trip")
def saga_trip(ctx, params):
    tag = params["tag"]
    flight = ctx.step.run("flight", _hit, f"{tag}:flight", compensate=_undo(tag, "flight"))
    hotel = ctx.step.run("hotel", _hit, f"{tag}:hotel", compensate=_undo(tag, "hotel", params.get("hold_undo", 0)))
    if params.get("broken"):
        ctx.step.run("extra", _hit, f"{tag}:extra", compensate=_undo(tag, "broken"))
    if params.get("fail"):
        ctx.step.run("car", _no_car, tag)
    ctx.step.wait_for_signal("confirm", "confirm")
    return {"flight": flight, "hotel": hotel}


@durableflow.workflow("t.saga-swallow")
def saga_swallow(ctx, params):
    tag = params["tag"]
    ctx.step.run("booked", _hit, f"{tag}:booked", compensate=_undo(tag, "booked"))
    try:
        ctx.step.run("slow", _until_cancelled, tag, ctx.execution_id)
    except BaseException:  # noqa: BLE001 - what the test shows cannot stop a cancel
        Marker.hit(f"{tag}:swallowed")
    ctx.step.run("after", _hit, f"{tag}:after")
    return "done"


@durableflow.workflow("t.plain-slow")
def plain_slow(ctx, params):
    tag = params["tag"]
    ctx.step.run("first", _hit, f"{tag}:first")
    ctx.step.run("slow", _until_cancelled, tag, ctx.execution_id)
    ctx.step.run("after", _hit, f"{tag}:after")


@durableflow.workflow("t.saga-abc")
def saga_abc(ctx, params):
    tag = params["tag"]
    a = ctx.step.run("a", _hit, f"{tag}:a")
    b = ctx.step.run("b", _fails_once if params.get("flaky") else _hit, tag if params.get("flaky") else f"{tag}:b", "b")
    c = ctx.step.run("c", _hit, f"{tag}:c")
    return [a, b, c]


@durableflow.workflow("t.meta-child")
def meta_child(ctx, params):
    tag, n = params["tag"], params["n"]
    ctx.metadata.increment("done", target="parent")
    ctx.metadata.append("children", n, target="root")
    ctx.step.run("hold", _hold_child, tag, n, params.get("hold_child"))
    return n


def _hold_child(tag: str, n: int, hold_child: int | None) -> int:
    Marker.hit(f"{tag}:hold-{n}")
    if n == hold_child and Marker.count(f"{tag}:hold-{n}") == 1:
        time.sleep(60)  # the test kills the worker here: the increment is committed already
    return n


@durableflow.workflow("t.meta-parent")
def meta_parent(ctx, params):
    children = [
        ctx.step.start(f"start-{n}", "t.meta-child", {"tag": params["tag"], "n": n, "hold_child": params.get("hold_child")})
        for n in range(params["n"])
    ]
    return [ctx.step.wait_for_execution(f"wait-{n}", child) for n, child in enumerate(children)]


@durableflow.workflow("t.metadata-progress")
def metadata_progress(ctx, params):
    for _ in range(params["n"]):
        ctx.metadata.increment("done")
    ctx.metadata.set("stage", "waiting")
    return ctx.step.wait_for_signal("go", "go")


@durableflow.workflow("t.deadline-nap")
def deadline_nap(ctx, params):
    """A booking, then a long sleep: a deadline shorter than the sleep cancels it asleep."""
    tag = params["tag"]
    ctx.step.run("booked", _hit, f"{tag}:booked", compensate=_undo(tag, "booked"))
    ctx.step.sleep("nap", 60)
    return "woke"


def _kill_myself(tag: str):
    import os
    import signal

    Marker.hit(f"{tag}:poison")
    os.kill(os.getpid(), signal.SIGKILL)


@durableflow.workflow("t.poison")
def poison(ctx, params):
    """A step that kills the process running it, every time (as an out-of-memory kill would)."""
    ctx.step.run("before", _hit, f"{params['tag']}:before")
    ctx.step.run("poison", _kill_myself, params["tag"])
    return "never"
