"""What a rate limit costs a step that never waits: ``run(rate_limit=)`` beside ``run``.

Deliveries run in this process as a worker runs them (``operations.deliver``), on a queue no
worker consumes. Two kinds of workflow of S trivial steps, each in one delivery:

- ``run``: S ``run`` steps (``bench.steps``);
- ``rate_limited``: S ``run`` steps sharing one ``RateLimit`` whose limit is never reached, so
  each step is admitted at once: one more transaction per step (the key's lock, the lease, two
  sums of the window and the waiting requests, the admission's INSERT).

The cost of one step is the slope between the smallest and the largest S (queries likewise).
"""

from __future__ import annotations

from typing import Any

import durableflow
from bench.kinds import steps_overhead
from bench.stats import per_step

__all__ = ["overhead", "summarize", "rows"]

QUEUE = "bench-ratelimits"
KINDS = ("run", "rate_limited")
WORKFLOWS = {"run": "bench.steps", "rate_limited": "bench.rate-limited-steps"}
# A billion a second: never reached, so every admission is the common case (room now).
NEVER_WAITS = durableflow.RateLimit("bench-api", 10**9, 1.0)


def _nothing(value: Any = None) -> None:
    return None


@durableflow.workflow("bench.rate-limited-steps")
def rate_limited_steps(ctx, params):
    for i in range(params["steps"]):
        ctx.step.run(f"s{i}", _nothing, i, rate_limit=NEVER_WAITS)


def overhead(sizes: list[int], repeats: int) -> dict[str, Any]:
    """Per kind and size: delivery times (ms) of each repeat, interleaved by kind, and queries."""
    return steps_overhead(WORKFLOWS, QUEUE, sizes, repeats)


def summarize(raw: dict[str, Any]) -> dict[str, Any]:
    """Per kind: marginal ms and queries per step; the rate-limited step over ``run``."""
    out = {kind: per_step(raw[kind]) for kind in KINDS}
    out["rate_limited"]["ms_over_run"] = out["rate_limited"]["ms_per_step"] / out["run"]["ms_per_step"]
    return out


def rows(summary: dict[str, Any]) -> list[tuple[str, float, str]]:
    """The report's lines: (label, value, unit)."""
    names = {"run": "run step", "rate_limited": "run step with rate_limit= (admitted at once)"}
    lines = []
    for kind in KINDS:
        lines.append((f"rate limit: {names[kind]}: marginal cost", summary[kind]["ms_per_step"], " ms"))
        lines.append((f"rate limit: {names[kind]}: queries per step", summary[kind]["queries_per_step"], ""))
    lines.append(("rate limit: rate-limited step / run step", summary["rate_limited"]["ms_over_run"], "x"))
    return lines
