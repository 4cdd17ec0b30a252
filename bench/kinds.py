"""Workflows of a few kinds compared in this process: deliveries timed interleaved by kind.

Deliveries run as a worker runs them (``operations.deliver``), on a queue no worker consumes.
Shared by the in-process comparisons (``bench/sagas.py``, ``bench/ratelimits.py``, ``bench/streams.py``).
"""

from __future__ import annotations

from typing import Any, Callable, Iterable

import durableflow
from bench.stats import timed_ms

__all__ = ["delivered_ms", "interleaved", "steps_overhead"]


def delivered_ms(workflow: str, params: dict[str, Any], queue: str, done: str = "completed") -> float:
    """Start ``workflow`` with ``params`` on ``queue``, time its one delivery (ms), check it ended ``done``."""
    # Imported here: the report imports the modules that call this in a process without Django set up.
    from durableflow import operations
    from durableflow.models import Execution

    execution = durableflow.start(workflow, params, queue=queue)
    elapsed = timed_ms(lambda: operations.deliver(execution.id))
    status = Execution.objects.values_list("status", flat=True).get(pk=execution.id)
    if status != done:
        raise RuntimeError(f"benchmark execution {execution.id} ({workflow}) is {status}")
    return elapsed


def interleaved(
    kinds: Iterable[str], deliver: Callable[[str, int], float], sizes: list[int], repeats: int
) -> dict[str, Any]:
    """Per kind and size: delivery times (ms) of each repeat, interleaved by kind, and queries
    (counted on separate deliveries: capturing them costs time; the start's own queries are the
    same for every size, so a slope leaves them out)."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    kinds = list(kinds)
    for kind in kinds:
        deliver(kind, 1)  # warm connections and prepared statements
    out: dict[str, Any] = {kind: {str(size): {"ms": []} for size in sizes} for kind in kinds}
    for _ in range(repeats):
        for size in sizes:
            for kind in kinds:
                out[kind][str(size)]["ms"].append(deliver(kind, size))

    def queries(kind: str, size: int) -> int:
        with CaptureQueriesContext(connection) as captured:
            deliver(kind, size)
        return len(captured.captured_queries)

    for kind in kinds:
        for size in sizes:
            out[kind][str(size)]["queries"] = min(queries(kind, size) for _ in range(2))
    return out


def steps_overhead(workflows: dict[str, str], queue: str, sizes: list[int], repeats: int) -> dict[str, Any]:
    """``interleaved`` over kinds of workflow that take ``{"steps": S}``: ``workflows`` maps each
    kind to its workflow's name, started on ``queue``."""
    return interleaved(
        workflows, lambda kind, steps: delivered_ms(workflows[kind], {"steps": steps}, queue), sizes, repeats
    )
