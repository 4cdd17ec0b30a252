"""An effect step's overhead beside a ``run`` step's: time and queries per step.

Deliveries run in this process as a worker runs them (``operations.deliver``), on a queue no
worker consumes. Three kinds of step, each in a workflow of S trivial steps in one delivery:
``run`` (``bench.steps``), an effect performed for the first time (begin, hold, perform,
settle, record) and an effect another execution already settled (begin finds the result,
record), both ``bench.effects``. The cost of a step is the slope between the smallest and the
largest S; queries are counted the same way.
"""

from __future__ import annotations

import uuid
from typing import Any

import durableflow
from bench.stats import per_step, timed_ms

__all__ = ["overhead", "summarize", "rows"]

QUEUE = "bench-effects"
KINDS = ("run", "effect", "effect_settled")


def _delivery(kind: str, steps: int) -> str:
    """Start an execution of ``kind`` (settling its effect ids first for ``effect_settled``)."""
    from durableflow import operations

    if kind == "run":
        return durableflow.start("bench.steps", {"steps": steps}, queue=QUEUE).id
    params = {"steps": steps, "prefix": uuid.uuid4().hex}
    if kind == "effect_settled":  # another execution settles the same effect ids first
        operations.deliver(durableflow.start("bench.effects", params, queue=QUEUE).id)
    return durableflow.start("bench.effects", params, queue=QUEUE).id


def _deliver(execution_id: str) -> float:
    # Imported here: the report imports this module in a process without Django set up.
    from durableflow import operations
    from durableflow.models import Execution

    elapsed = timed_ms(lambda: operations.deliver(execution_id))
    status = Execution.objects.values_list("status", flat=True).get(pk=execution_id)
    if status != "completed":
        raise RuntimeError(f"benchmark execution {execution_id} is {status}, expected completed")
    return elapsed


def _queries(kind: str, steps: int) -> int:
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    execution_id = _delivery(kind, steps)
    with CaptureQueriesContext(connection) as captured:
        _deliver(execution_id)
    return len(captured.captured_queries)


def overhead(sizes: list[int], repeats: int) -> dict[str, Any]:
    """Per kind and size: delivery times (ms) of each repeat, interleaved by kind, and queries
    (counted on separate deliveries: capturing them costs time)."""
    for kind in KINDS:
        _deliver(_delivery(kind, 1))  # warm connections and prepared statements
    out: dict[str, Any] = {kind: {str(size): {"ms": []} for size in sizes} for kind in KINDS}
    for _ in range(repeats):
        for size in sizes:
            for kind in KINDS:
                out[kind][str(size)]["ms"].append(_deliver(_delivery(kind, size)))
    for kind in KINDS:
        for size in sizes:
            out[kind][str(size)]["queries"] = min(_queries(kind, size) for _ in range(2))
    return out


def summarize(raw: dict[str, Any]) -> dict[str, Any]:
    """Per kind: the marginal milliseconds and queries of one step; each effect kind over ``run``."""
    out: dict[str, Any] = {}
    for kind in KINDS:
        out[kind] = per_step(raw[kind])
    for kind in KINDS[1:]:
        out[kind]["ms_over_run"] = out[kind]["ms_per_step"] / out["run"]["ms_per_step"]
        out[kind]["queries_over_run"] = out[kind]["queries_per_step"] / out["run"]["queries_per_step"]
    return out


def rows(summary: dict[str, Any]) -> list[tuple[str, float, str]]:
    """The report's lines: (label, value, unit)."""
    names = {"run": "run step", "effect": "effect step (performed)", "effect_settled": "effect step (settled before)"}
    lines = []
    for kind in KINDS:
        lines.append((f"{names[kind]}: marginal cost", summary[kind]["ms_per_step"], " ms"))
        lines.append((f"{names[kind]}: queries per step", summary[kind]["queries_per_step"], ""))
        if kind != "run":
            lines.append((f"{names[kind]} / run step: time", summary[kind]["ms_over_run"], "x"))
    return lines
