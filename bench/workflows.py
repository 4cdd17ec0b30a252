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
