"""Workflows the test suite runs, in-process and on real worker processes."""

import os
import random
import signal
import time

import durableflow
from durableflow import RetryableError, WorkflowValueError
from tests.testapp import (
    admin_workflows,  # noqa: F401 - registers the admin tests' workflows
    api_workflows,  # noqa: F401 - registers the REST API tests' workflows
    chaos,  # noqa: F401 - the chaos suite's workflows (tests/chaos/)
    deploys,  # noqa: F401 - the workflows whose code a deploy changes
    document_tasks,  # noqa: F401 - registers the tasks workflow documents run
    effects,  # noqa: F401 - registers the workflows with effects
    faults,  # noqa: F401 - the workflows that meet database failures (and their injection)
    limits,  # noqa: F401 - concurrency keys on real workers
    observers,  # noqa: F401 - receivers of durableflow's signals, and their workflow
    ratelimits,  # noqa: F401 - rate-limited steps
    sagas,  # noqa: F401 - compensations, cancels, rerun/fork and metadata on real workers
    stores,  # noqa: F401 - store workflows (and their crash hook)
    timeout_workflows,  # noqa: F401 - the workflows of the step timeout tests
    traced,  # noqa: F401 - a run traced on real workers (OpenTelemetry)
    streams,  # noqa: F401 - a workflow that streams tokens slowly
    txsteps,  # noqa: F401 - registers the transactional step workflows
    waits,  # noqa: F401 - registers the waits and composition workflows
)
from tests.testapp.models import Marker


@durableflow.workflow("t.ping")
def ping(ctx, params):
    return ctx.step.run("pong", lambda: "pong")


@durableflow.workflow("t.return-params")
def return_params(ctx, params):
    """Completes with its params as the result (any size the start accepted)."""
    return params


@durableflow.workflow("t.steps")
def steps(ctx, params):
    a = ctx.step.run("a", lambda: 1)
    b = ctx.step.run("b", lambda: a + 1)
    c = ctx.step.run("c", lambda: {"sum": a + b})
    return {"a": a, "b": b, "c": c}


@durableflow.workflow("t.loop")
def loop(ctx, params):
    total = 0
    for i in range(params["n"]):
        total += ctx.step.run(f"s{i}", lambda i=i: i)
    return total


@durableflow.workflow("t.marker")
def marker(ctx, params):
    return ctx.step.run("mark", Marker.hit, params["tag"])


@durableflow.workflow("t.random-sleep")
def random_sleep(ctx, params):
    before = ctx.step.run("draw", random.random)
    ctx.step.sleep("nap", params["seconds"])
    after = ctx.step.run("again", lambda: before)
    return {"before": before, "after": after}


@durableflow.workflow("t.set-value")
def set_value(ctx, params):
    try:
        ctx.step.run("bad", lambda: {1, 2, 3})
    except WorkflowValueError as exc:
        return {"code": exc.code}
    return {"code": None}


def _slow(tag: str, hold: float) -> int:
    """Mark the attempt; hold only on the first one (the one a test will kill or stop)."""
    pid = Marker.hit(f"{tag}:slow")
    if Marker.count(f"{tag}:slow") == 1:
        time.sleep(hold)
    return pid


@durableflow.workflow("t.crash")
def crash(ctx, params):
    tag = params["tag"]
    before = ctx.step.run("before", Marker.hit, f"{tag}:before")
    slow = ctx.step.run("slow", _slow, tag, params["hold"])
    after = ctx.step.run("after", Marker.hit, f"{tag}:after")
    return {"before": before, "slow": slow, "after": after}


@durableflow.workflow("t.kill-after-commit")
def kill_after_commit(ctx, params):
    tag = params["tag"]
    first = ctx.step.run("first", Marker.hit, f"{tag}:first")
    # The step is committed; the delivery has not ended. Die here, once.
    if Marker.count(f"{tag}:killed") == 0:
        Marker.hit(f"{tag}:killed")
        os.kill(os.getpid(), signal.SIGKILL)
    second = ctx.step.run("second", Marker.hit, f"{tag}:second")
    return {"first": first, "second": second}


def _flaky(tag: str, failures: int, interval: float) -> int:
    Marker.hit(f"{tag}:attempt")
    attempts = Marker.count(f"{tag}:attempt")
    if attempts <= failures:
        raise RetryableError(f"attempt {attempts} failed", max_attempts=failures + 1, retry_interval=interval)
    return attempts


@durableflow.workflow("t.retry")
def retry(ctx, params):
    return ctx.step.run("flaky", _flaky, params["tag"], params["failures"], params["interval"])


@durableflow.workflow("t.timer")
def timer(ctx, params):
    t0 = ctx.step.run("t0", time.time)
    ctx.step.sleep("timer", params["seconds"])
    t1 = ctx.step.run("t1", time.time)
    return {"t0": t0, "t1": t1}
