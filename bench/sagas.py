"""What sagas cost beside a ``run`` step: a compensable step, a compensation, a metadata change.

Deliveries run in this process as a worker runs them (``operations.deliver``), on a queue no
worker consumes. Four kinds of workflow of S trivial steps, each in one delivery:

- ``run``: S ``run`` steps (``bench.steps``);
- ``compensable``: S ``run`` steps with ``compensate=`` (the first also marks the execution);
- ``compensation``: the same, then ``ctx.compensate()``: each step's compensation runs too
  (two fenced writes each: started, then finished), ending ``compensated``;
- ``metadata``: S ``ctx.metadata.increment`` calls (one transaction each: lock the row, insert
  the record, write the metadata);
- ``patched``: S ``ctx.patched(...)`` calls on a new run (each journals its marker: one INSERT,
  as a ``run`` step's record).

The cost of one step is the slope between the smallest and the largest S (queries likewise);
a compensation's own cost is the ``compensation`` slope minus the ``compensable`` one.
"""

from __future__ import annotations

from typing import Any

import durableflow
from bench.kinds import delivered_ms, interleaved
from bench.stats import per_step

__all__ = ["overhead", "summarize", "rows"]

QUEUE = "bench-sagas"
KINDS = ("run", "compensable", "compensation", "metadata", "patched")
WORKFLOWS = {
    "run": "bench.steps",
    "compensable": "bench.saga-steps",
    "compensation": "bench.saga-steps",
    "metadata": "bench.metadata-steps",
    "patched": "bench.patched-steps",
}
DONE = {"compensation": "compensated"}


def _nothing(value: Any = None) -> None:
    return None


@durableflow.workflow("bench.saga-steps")
def saga_steps(ctx, params):
    for i in range(params["steps"]):
        ctx.step.run(f"s{i}", _nothing, i, compensate=_nothing)
    if params.get("compensate"):
        ctx.compensate()


@durableflow.workflow("bench.metadata-steps")
def metadata_steps(ctx, params):
    for _ in range(params["steps"]):
        ctx.metadata.increment("done")


@durableflow.workflow("bench.patched-steps")
def patched_steps(ctx, params):
    for i in range(params["steps"]):
        ctx.patched(f"p{i}")


def _deliver(kind: str, steps: int) -> float:
    params = {"steps": steps, "compensate": kind == "compensation"}
    return delivered_ms(WORKFLOWS[kind], params, QUEUE, DONE.get(kind, "completed"))


def overhead(sizes: list[int], repeats: int) -> dict[str, Any]:
    """Per kind and size: delivery times (ms) of each repeat, interleaved by kind, and queries."""
    return interleaved(KINDS, _deliver, sizes, repeats)


def summarize(raw: dict[str, Any]) -> dict[str, Any]:
    """Per kind: marginal ms and queries per step, over ``run``; a compensation's own cost."""
    out: dict[str, Any] = {}
    for kind in KINDS:
        out[kind] = per_step(raw[kind])
    for kind in KINDS[1:]:
        out[kind]["ms_over_run"] = out[kind]["ms_per_step"] / out["run"]["ms_per_step"]
    own = out["compensation"]["ms_per_step"] - out["compensable"]["ms_per_step"]
    out["one_compensation"] = {"ms": own, "ms_over_run": own / out["run"]["ms_per_step"]}
    return out


def rows(summary: dict[str, Any]) -> list[tuple[str, float, str]]:
    """The report's lines: (label, value, unit)."""
    names = {
        "run": "run step",
        "compensable": "run step with compensate=",
        "compensation": "compensable step + its compensation",
        "metadata": "metadata.increment",
        "patched": "ctx.patched() marker",
    }
    lines = []
    for kind in KINDS:
        if kind not in summary:  # a summary from before the kind was measured
            continue
        area = "patch" if kind == "patched" else "saga"
        lines.append((f"{area}: {names[kind]}: marginal cost", summary[kind]["ms_per_step"], " ms"))
        lines.append((f"{area}: {names[kind]}: queries per step", summary[kind]["queries_per_step"], ""))
        if kind != "run":
            lines.append((f"{area}: {names[kind]} / run step", summary[kind]["ms_over_run"], "x"))
    lines.append(("saga: one compensation (journaled twice)", summary["one_compensation"]["ms"], " ms"))
    lines.append(("saga: one compensation / run step", summary["one_compensation"]["ms_over_run"], "x"))
    return lines
