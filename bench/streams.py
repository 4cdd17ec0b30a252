"""What a stream chunk costs beside a step: ``ctx.stream(...).write`` and ``ctx.step.stream`` beside ``run``.

Deliveries run in this process as a worker runs them (``operations.deliver``), on a queue no
worker consumes. Three kinds of workflow of S units, each in one delivery:

- ``run``: S trivial ``run`` steps (``bench.steps``): one fenced INSERT of a record each;
- ``write``: S ``ctx.stream("out").write(i)``: one fenced INSERT of a chunk each (and, once per
  delivery, the stream's last stored seq); on PostgreSQL the chunk's trigger notifies readers;
- ``step_stream``: one ``ctx.step.stream`` over S items: a chunk each, and one record at the end.

The cost of one unit is the slope between the smallest and the largest S (queries likewise).
"""

from __future__ import annotations

from typing import Any

import durableflow
from bench.kinds import steps_overhead
from bench.stats import per_step

__all__ = ["overhead", "summarize", "rows"]

QUEUE = "bench-streams"
KINDS = ("run", "write", "step_stream")
WORKFLOWS = {"run": "bench.steps", "write": "bench.stream-writes", "step_stream": "bench.step-stream"}


@durableflow.workflow("bench.stream-writes")
def stream_writes(ctx, params):
    out = ctx.stream("out")
    for i in range(params["steps"]):
        out.write(i)


@durableflow.workflow("bench.step-stream")
def step_stream(ctx, params):
    ctx.step.stream("items", "out", range(params["steps"]))


def overhead(sizes: list[int], repeats: int) -> dict[str, Any]:
    """Per kind and size: delivery times (ms) of each repeat, interleaved by kind, and queries."""
    return steps_overhead(WORKFLOWS, QUEUE, sizes, repeats)


def summarize(raw: dict[str, Any]) -> dict[str, Any]:
    """Per kind: marginal ms and queries per unit; a chunk written over a ``run`` step."""
    out = {kind: per_step(raw[kind]) for kind in KINDS}
    for kind in ("write", "step_stream"):
        out[kind]["ms_over_run"] = out[kind]["ms_per_step"] / out["run"]["ms_per_step"]
    return out


def rows(summary: dict[str, Any]) -> list[tuple[str, float, str]]:
    """The report's lines: (label, value, unit)."""
    names = {"run": "run step", "write": "ctx.stream().write chunk", "step_stream": "ctx.step.stream item"}
    lines = []
    for kind in KINDS:
        lines.append((f"streams: {names[kind]}: marginal cost", summary[kind]["ms_per_step"], " ms"))
        lines.append((f"streams: {names[kind]}: queries per unit", summary[kind]["queries_per_step"], ""))
    lines.append(("streams: chunk write / run step", summary["write"]["ms_over_run"], "x"))
    lines.append(("streams: ctx.step.stream item / run step", summary["step_stream"]["ms_over_run"], "x"))
    return lines
