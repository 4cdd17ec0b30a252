"""The benchmark's workloads, as durableflow workflows (the peers run the same shapes)."""

import time

import durableflow


def trivial(i: int) -> int:
    return i


@durableflow.workflow("bench.steps")
def steps(ctx, params):
    """S trivial steps in one delivery: the unit of the overhead, latency and throughput runs."""
    total = 0
    for i in range(params["steps"]):
        total += ctx.step.run(f"s{i}", trivial, i)
    return total


@durableflow.workflow("bench.replay")
def replay(ctx, params):
    """N recorded steps, then parked on a far timer: each delivery replays all N and parks again."""
    for i in range(params["steps"]):
        ctx.step.run(f"s{i}", trivial, i)
    ctx.step.sleep("park", 10**8)


@durableflow.workflow("bench.sleep")
def sleep(ctx, params):
    """A durable timer; the step after it records the wall clock at wake-up."""
    ctx.step.sleep("timer", params["seconds"])
    return ctx.step.run("woke", time.time)


@durableflow.workflow("bench.wait-event")
def wait_event(ctx, params):
    """Waits for its event; the step after records the wall clock at the resume."""
    ctx.step.wait_for_event("event", "bench.go", match={"id": params["id"]})
    return ctx.step.run("resumed", time.time)


@durableflow.workflow("bench.invoke")
def invoke(ctx, params):
    """A parent that invokes a one-step child and returns its result."""
    return ctx.step.invoke("child", "bench.steps", {"steps": 1})


@durableflow.workflow("bench.map")
def map_items(ctx, params):
    """Fan-out of trivial items, each its own task, gathered in order."""
    return ctx.step.map("items", trivial, list(range(params["items"])))
