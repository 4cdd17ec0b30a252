"""The benchmark's workloads, as durableflow workflows (the peers run the same shapes)."""

import time

import durableflow


def trivial(i: int) -> int:
    return i


@durableflow.task("bench.trivial", version="1")
def trivial_task(value):
    """The task of the benchmark's workflow documents: the same work as ``trivial``."""
    return value


@durableflow.workflow("bench.steps")
def steps(ctx, params):
    """S trivial steps in one delivery: the unit of the overhead, latency and throughput runs."""
    total = 0
    for i in range(params["steps"]):
        total += ctx.step.run(f"s{i}", trivial, i)
    return total


@durableflow.workflow("bench.keyed", concurrency=durableflow.Concurrency(key="params.key", limit=1))
def keyed(ctx, params):
    """``bench.steps`` under a concurrency key: what a keyed start costs (each its own key: it holds a slot)."""
    return steps(ctx, params)


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


def _not_found(effect_id: str) -> dict:
    return {"status": "not-found"}


@durableflow.workflow("bench.effects")
def effects(ctx, params):
    """S trivial effect steps in one delivery (ids ``<prefix>-<i>``): the cost of the protocol itself."""
    total = 0
    for i in range(params["steps"]):
        total += ctx.step.effect(
            f"e{i}",
            effect_id=f"{params['prefix']}-{i}",
            operation="bench.noop/v1",
            input={"i": i},
            retry_in=1,
            lookup=_not_found,
            perform=lambda effect_id, i=i: i,
        )
    return total


Counter = durableflow.define_store("bench-counter", initial=lambda: {"n": 0})
Flag = durableflow.define_store("bench-flag", initial=lambda: {"ready": False, "other": 0})


def increment(draft):
    draft["n"] += 1


@durableflow.workflow("bench.store-increments")
def store_increments(ctx, params):
    """N increments of one shared counter: the unit of the contended-store measurement."""
    counter = ctx.step.store(Counter, id=params["store"])
    for i in range(params["n"]):
        counter.update(f"inc-{i}", increment)


@durableflow.workflow("bench.store-when")
def store_when(ctx, params):
    """Wait for a flag; the step after it records when the waiter went on."""
    ctx.step.store(Flag, id=params["store"]).when("ready", lambda state: state["ready"])
    return ctx.step.run("woke", time.time)


@durableflow.workflow("bench.wait-event")
def wait_event(ctx, params):
    """Waits for its event; the step after records the wall clock at the resume."""
    ctx.step.wait_for_event("event", "bench.go", match={"id": params["id"]})
    return ctx.step.run("resumed", time.time)


@durableflow.workflow("bench.wait-signal")
def wait_signal(ctx, params):
    """Waits for a signal; the step after records the wall clock at the resume."""
    ctx.step.wait_for_signal("signal", "bench.go")
    return ctx.step.run("resumed", time.time)


@durableflow.workflow("bench.wait-token")
def wait_token(ctx, params):
    """Waits for its default token; the step after records the wall clock at the resume."""
    ctx.step.wait_for_token("token")
    return ctx.step.run("resumed", time.time)


@durableflow.workflow("bench.invoke")
def invoke(ctx, params):
    """A parent that invokes a one-step child and returns its result."""
    return ctx.step.invoke("child", "bench.steps", {"steps": 1})


@durableflow.workflow("bench.map")
def map_items(ctx, params):
    """Fan-out of trivial items, each its own task, gathered in order."""
    return ctx.step.map("items", trivial, list(range(params["items"])))
