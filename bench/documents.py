"""Workflow documents: compile time of a large document, and the per-state overhead of a
document run beside the same steps written as a code workflow.

Plain functions that take sizes and return numbers. Deliveries run in this process as a
worker runs them (``operations.deliver``), on a queue no worker consumes. The document of S
states is a chain of S ``work`` states, each running the trivial task ``bench.trivial`` on
``data``, then a final state: the same S ``run`` steps as the code workflow ``bench.steps``,
plus what a document adds (its interpreter, JMESPath input, a trace record per transition).
"""

from __future__ import annotations

import time
from typing import Any

from bench.stats import per_step, summary, timed_ms

__all__ = ["large_document", "chain_document", "compile_time", "overhead", "summarize", "rows"]

QUEUE = "bench-documents"


def large_document(states: int) -> dict[str, Any]:
    """``states`` states of every kind in turn (work, choose with a guard, on with an event and a
    delay, a nested flow every 50th), looping back through a limited state: what a big real
    document holds, for the compile-time measurement."""
    body: dict[str, Any] = {}
    for i in range(states):
        following = f"s{i + 1}" if i + 1 < states else "end"
        kind = i % 4
        if i % 50 == 49:
            body[f"s{i}"] = {"flow": {"initial": "a", "states": {
                "a": {"work": {"task": "bench.trivial", "version": "1"}, "then": "b"}, "b": {"final": True},
            }}, "then": following}  # fmt: skip
        elif kind == 0:
            body[f"s{i}"] = {"work": {"task": "bench.trivial", "version": "1"}, "input": "data", "then": following,
                             "catch": "end"}  # fmt: skip
        elif kind == 1:
            body[f"s{i}"] = {"choose": [{"guard": f"data > `{i}`", "to": following}], "otherwise": "end"}
        elif kind == 2:
            body[f"s{i}"] = {"on": [{"event": "go", "guard": "event.payload.ok", "to": following}],
                             "after": {"ms": 60000, "to": "end"}}  # fmt: skip
        else:
            body[f"s{i}"] = {"work": {"task": "bench.trivial", "version": "1"}, "then": following}
    body["end"] = {"choose": [{"guard": "visits.end < `3`", "to": "s0"}], "otherwise": "done", "limit": 3}
    body["done"] = {"final": True}
    return {"$workflow": "0.2", "initial": "s0", "states": body}


def chain_document(steps: int) -> dict[str, Any]:
    """S work states running ``bench.trivial`` in turn, then done."""
    body = {
        f"s{i}": {"work": {"task": "bench.trivial", "version": "1"}, "then": f"s{i + 1}" if i + 1 < steps else "done"}
        for i in range(steps)
    }
    return {"$workflow": "0.2", "initial": "s0", "states": {**body, "done": {"final": True}}}


def compile_time(states: int, repeats: int) -> dict[str, Any]:
    """Milliseconds to compile (validate and lower) a ``states``-state document, CPU time too."""
    from durableflow.documents import compile_document

    document = large_document(states)
    compiled = compile_document(document)
    wall, cpu = [], []
    for _ in range(repeats):
        started = time.process_time()
        wall.append(timed_ms(lambda: compile_document(document)))
        cpu.append((time.process_time() - started) * 1000)
    return {"states": len(compiled["states"]), "ms": summary(wall), "cpu_ms": summary(cpu)}


def _deliver(workflow: str, params: Any) -> float:
    import durableflow
    from durableflow import operations
    from durableflow.models import Execution

    execution = durableflow.start(workflow, params, queue=QUEUE)
    elapsed = timed_ms(lambda: operations.deliver(execution.id))
    status = Execution.objects.values_list("status", flat=True).get(pk=execution.id)
    if status != "completed":
        raise RuntimeError(f"benchmark execution {execution.id} is {status}, expected completed")
    return elapsed


def _queries(workflow: str, params: Any) -> int:
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    import durableflow
    from durableflow import operations

    execution = durableflow.start(workflow, params, queue=QUEUE)
    with CaptureQueriesContext(connection) as captured:
        operations.deliver(execution.id)
    return len(captured.captured_queries)


def overhead(sizes: list[int], repeats: int) -> dict[str, Any]:
    """Per size: delivery times (ms) of the document and of the code workflow, interleaved;
    queries of each (counted on separate deliveries)."""
    from durableflow import operations

    names = {}
    for size in sizes:
        names[size] = f"bench.document-{size}"
        operations.save_document(names[size], chain_document(size))
    kinds = {"document": lambda size: (names[size], 0), "code": lambda size: ("bench.steps", {"steps": size})}
    for kind, call in kinds.items():
        _deliver(*call(min(sizes)))  # warm connections and caches
    out: dict[str, Any] = {kind: {str(size): {"ms": []} for size in sizes} for kind in kinds}
    for _ in range(repeats):
        for size in sizes:
            for kind, call in kinds.items():
                out[kind][str(size)]["ms"].append(_deliver(*call(size)))
    for kind, call in kinds.items():
        for size in sizes:
            out[kind][str(size)]["queries"] = min(_queries(*call(size)) for _ in range(2))
    return out


def summarize(raw: dict[str, Any]) -> dict[str, Any]:
    """The marginal cost of one state (document) and of one step (code), and their ratio."""
    out: dict[str, Any] = {"compile": raw["compile"]}
    for kind in ("document", "code"):
        out[kind] = per_step(raw["overhead"][kind])
    out["document_over_code"] = out["document"]["ms_per_step"] / out["code"]["ms_per_step"]
    return out


def rows(summary_: dict[str, Any]) -> list[tuple[str, float, str]]:
    compiled = summary_["compile"]
    return [
        (f"document: compile {compiled['states']} states p50", compiled["ms"]["p50"], " ms"),
        (f"document: compile {compiled['states']} states CPU p50", compiled["cpu_ms"]["p50"], " ms"),
        ("document: marginal cost per work state", summary_["document"]["ms_per_step"], " ms"),
        ("document: queries per work state", summary_["document"]["queries_per_step"], ""),
        ("code workflow: marginal cost per run step", summary_["code"]["ms_per_step"], " ms"),
        ("document state / code step: time", summary_["document_over_code"], "x"),
    ]
