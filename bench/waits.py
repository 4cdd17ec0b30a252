"""Waits and composition on real worker processes: event-to-resume latency, a child invoke's
round trip, and a map, each beside the Celery shape that does the same without durability.

- event → resume: ``send_event`` to the workflow's next step being recorded (that step records
  the worker's wall clock), against a 1-task chain's ``apply_async`` → ``get()``, both polled every
  millisecond (``bench.live``'s polled variants). The sweep plays no part: the publisher wakes
  the execution after its commit. The same for a ``signal`` and a ``complete_token``, in rotation.
- invoke: ``start`` of a parent that invokes a one-step child, to the parent's completion,
  against a one-step workflow's start → completion (the cost of one level of composition).
- map: ``start`` → completion of a map of N trivial items, against a Celery group of N tasks.

Samples of the compared systems alternate one by one, so that both see the same machine.
"""

from __future__ import annotations

import time
import uuid
from typing import Any

from celery import group

import durableflow
from bench.live import CHAIN_QUEUE, _completed, chain_polled_ms, durableflow_polled_ms
from bench.stats import summary
from bench.tasks import chain_step
from durableflow.models import Execution, StepRecord
from tests.cluster import wait_for as wait_until


def _resume_ms(workflow: str, params: dict, wake) -> float:
    """``wake(execution_id)`` → the waiter's next step recorded (the worker's clock at that step)."""
    execution = durableflow.start(workflow, params)
    wait_until(
        lambda: Execution.objects.filter(pk=execution.id, status="waiting").exists(),
        timeout=60,
        interval=0.001,
        what="the execution to wait",
    )
    sent = time.time()
    if wake(execution.id) != 1:
        raise RuntimeError("the wake-up satisfied no wait")
    resumed = wait_until(
        lambda: (
            StepRecord.objects.filter(execution_id=execution.id, key="resumed").values_list("value", flat=True).first()
        ),
        timeout=60,
        interval=0.001,
        what="the resumed step",
    )
    return (resumed - sent) * 1000


def event_resume_ms() -> float:
    """send_event → the waiter's next step recorded."""
    key = uuid.uuid4().hex
    return _resume_ms("bench.wait-event", {"id": key}, lambda _: durableflow.send_event("bench.go", {"id": key}))


def signal_resume_ms() -> float:
    """signal → the waiter's next step recorded."""
    return _resume_ms("bench.wait-signal", {}, lambda execution_id: durableflow.signal(execution_id, "bench.go"))


def token_resume_ms() -> float:
    """complete_token → the waiter's next step recorded."""
    return _resume_ms("bench.wait-token", {}, lambda execution_id: durableflow.complete_token(f"{execution_id}:token"))


def invoke_ms() -> float:
    started = time.perf_counter()
    execution = durableflow.start("bench.invoke")
    wait_until(lambda: _completed(execution.id), timeout=60, interval=0.001, what="the parent")
    return (time.perf_counter() - started) * 1000


def map_s(items: int) -> float:
    started = time.perf_counter()
    execution = durableflow.start("bench.map", {"items": items})
    wait_until(lambda: _completed(execution.id), timeout=600, interval=0.005, what="the map")
    return time.perf_counter() - started


def group_s(items: int) -> float:
    started = time.perf_counter()
    result = group(chain_step.s(0, i) for i in range(items)).set(queue=CHAIN_QUEUE).apply_async()
    values = result.get(timeout=600, interval=0.005)
    if values != list(range(items)):
        raise RuntimeError("the group computed something else")
    return time.perf_counter() - started


def _alternate(n: int, ours, theirs) -> tuple[list[float], list[float]]:
    a, b = _rotate(n, ours, theirs)
    return a, b


def _rotate(n: int, *measures) -> list[list[float]]:
    """``n`` samples of each of ``measures``, taken one by one in an order that rotates."""
    for measure in measures:
        measure()  # warm every path
    samples: list[list[float]] = [[] for _ in measures]
    kinds = list(zip(samples, measures))
    for i in range(n):
        shift = i % len(kinds)
        for bucket, measure in kinds[shift:] + kinds[:shift]:
            bucket.append(measure())
    return samples


def measure(n: int, map_items: int, map_repeats: int) -> dict[str, Any]:
    """One round of the measurements (raw summaries; ratios are taken in the report)."""
    event, signal, token, chain = _rotate(
        n, event_resume_ms, signal_resume_ms, token_resume_ms, lambda: chain_polled_ms(1)
    )
    invoke, one_step = _alternate(n, invoke_ms, lambda: durableflow_polled_ms(1))
    mapped, grouped = _alternate(map_repeats, lambda: map_s(map_items), lambda: group_s(map_items))
    return {
        "event_ms": summary(event),
        "signal_ms": summary(signal),
        "token_ms": summary(token),
        "chain_ms": summary(chain),
        "invoke_ms": summary(invoke),
        "one_step_ms": summary(one_step),
        "map_s": summary(mapped),
        "group_s": summary(grouped),
        "map_items": map_items,
    }
