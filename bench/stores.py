"""Durable stores on real worker processes: a contended counter and ``when`` wake latency.

The worker the benchmark starts (two pool processes) runs both. Plain functions that take
sizes and return numbers; ``bench.report`` puts them beside the floor INSERT.
"""

from __future__ import annotations

import time
import uuid
from typing import Any

import durableflow
from bench.stats import summary
from bench.workflows import Flag
from durableflow.models import Execution, StepRecord, Store, StoreLedger, StoreWaiter
from tests.cluster import wait_for as wait_until


def _completed(execution_id: str) -> bool:
    status = Execution.objects.values_list("status", flat=True).get(pk=execution_id)
    if status not in ("pending", "running", "waiting", "completed"):
        raise RuntimeError(f"benchmark execution {execution_id} ended {status}")
    return status == "completed"


def contended_counter(executions: int, increments: int) -> dict[str, Any]:
    """``executions`` workflows each increment one shared store ``increments`` times, at once.

    ``updates_per_s`` is the span of the applied changes (first to last ledger entry, the
    database clock); ``wall_updates_per_s`` counts from the first start to the last completion.
    """
    store_id = f"contended-{uuid.uuid4().hex[:8]}"
    started = time.perf_counter()
    ids = [
        durableflow.start("bench.store-increments", {"store": store_id, "n": increments}).id for _ in range(executions)
    ]
    for execution_id in ids:
        wait_until(lambda execution_id=execution_id: _completed(execution_id), timeout=900, interval=0.01)
    wall = time.perf_counter() - started
    total = executions * increments
    store = Store.objects.get(name="bench-counter", store_id=store_id)
    ledger = StoreLedger.objects.filter(name="bench-counter", store_id=store_id)
    versions = list(ledger.order_by("version").values_list("version", flat=True))
    if store.state != {"n": total} or versions != list(range(1, total + 1)):
        raise RuntimeError(f"the contended counter is wrong: {store.state}, {len(versions)} ledger entries")
    first, last = (ledger.order_by(order).values_list("applied_at", flat=True)[0] for order in ("id", "-id"))
    span = (last - first).total_seconds()
    return {
        "updates": total,
        "executions": executions,
        "seconds": span,
        "updates_per_s": (total - 1) / span if span > 0 else float("nan"),
        "ms_per_update": span * 1000 / (total - 1) if total > 1 else float("nan"),
        "wall_seconds": wall,
        "wall_updates_per_s": total / wall,
    }


def when_latency(n: int) -> dict[str, Any]:
    """Milliseconds from a committed store change to the woken waiter's next step being recorded."""
    samples = []
    for _ in range(n):
        store_id = f"when-{uuid.uuid4().hex[:8]}"
        execution = durableflow.start("bench.store-when", {"store": store_id})
        wait_until(
            lambda: (
                StoreWaiter.objects.filter(execution_id=execution.id).exists()
                and Execution.objects.values_list("status", flat=True).get(pk=execution.id) == "waiting"
            ),
            timeout=60,
            interval=0.005,
            what="the waiter to register",
        )
        durableflow.stores.update(Flag, store_id, lambda draft: draft.update(ready=True))
        committed = time.time()
        wait_until(lambda: _completed(execution.id), timeout=60, interval=0.002, what="the woken waiter")
        woke = StepRecord.objects.get(execution_id=execution.id, key="woke").finished_at.timestamp()
        samples.append((woke - committed) * 1000)
    return {"ms": summary(samples), "samples": samples}
