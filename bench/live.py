"""Measurements on real worker processes: latency, throughput, timers, memory.

durableflow and the Celery-chain peer run the same trivial steps on the same worker
processes (one Celery worker, two pool processes), one after the other.
"""

from __future__ import annotations

import time
import uuid
from datetime import datetime, timedelta
from typing import Any

import psutil
from celery import chain
from django.db import transaction

import durableflow
from bench.ceiling import Primary
from bench.stats import percentile, summary
from bench.tasks import chain_step
from durableflow.models import Execution, StepRecord
from tests.cluster import wait_for as wait_until

CHAIN_QUEUE = "bench-chain"


def _completed(execution_id: str) -> bool:
    status = Execution.objects.values_list("status", flat=True).get(pk=execution_id)
    if status not in ("pending", "running", "waiting", "completed"):
        raise RuntimeError(f"benchmark execution {execution_id} ended {status}")
    return status == "completed"


def _chain(steps: int):
    return chain(chain_step.s(0, 0), *(chain_step.s(i) for i in range(1, steps))).set(queue=CHAIN_QUEUE)


# Latency: start -> result, one at a time --------------------------------------------------------
#
# What a caller gets with the public defaults on both sides: ``durableflow.result()`` without a
# poll_interval, and ``AsyncResult.get()`` without an interval (on Redis it is woken by pub/sub;
# on the file result backend it polls every 0.5 s, Celery's default).


def durableflow_latency_ms(steps: int) -> float:
    started = time.perf_counter()
    execution = durableflow.start("bench.steps", {"steps": steps})
    value = durableflow.result(execution.id, timeout=60)
    elapsed = (time.perf_counter() - started) * 1000
    if value != sum(range(steps)):
        raise RuntimeError(f"the workflow computed {value}")
    return elapsed


def durableflow_atomic_latency_ms(steps: int) -> float:
    """The same, started inside the caller's ``transaction.atomic()`` (a view's transaction): the
    INSERT is the transaction's, the delivery is sent with its commit."""
    started = time.perf_counter()
    with transaction.atomic():
        execution = durableflow.start("bench.steps", {"steps": steps})
    value = durableflow.result(execution.id, timeout=60)
    elapsed = (time.perf_counter() - started) * 1000
    if value != sum(range(steps)):
        raise RuntimeError(f"the workflow computed {value}")
    return elapsed


def chain_latency_ms(steps: int) -> float:
    started = time.perf_counter()
    result = _chain(steps).apply_async()
    value = result.get(timeout=60)
    elapsed = (time.perf_counter() - started) * 1000
    if value != sum(range(steps)):
        raise RuntimeError(f"the chain computed {value}")
    return elapsed


# The same, both sides polled every millisecond: the engine's own latency without the waiting
# mechanism's granularity. ``bench.waits`` compares against these, as it always did.


def durableflow_polled_ms(steps: int) -> float:
    started = time.perf_counter()
    execution = durableflow.start("bench.steps", {"steps": steps})
    wait_until(lambda: _completed(execution.id), timeout=60, interval=0.001, what="a durableflow execution")
    return (time.perf_counter() - started) * 1000


def chain_polled_ms(steps: int) -> float:
    started = time.perf_counter()
    result = _chain(steps).apply_async()
    value = result.get(timeout=60, interval=0.001)
    if value != sum(range(steps)):
        raise RuntimeError(f"the chain computed {value}")
    return (time.perf_counter() - started) * 1000


def latency(sizes: list[int], n: int) -> dict[str, Any]:
    """Samples of both systems, alternating one by one so that they see the same machine (and,
    for the smallest size, starts inside the caller's transaction among them)."""
    samples: dict[str, dict[str, list[float]]] = {"durableflow": {}, "chain": {}, "atomic": {}}
    for size in sizes:
        durableflow_latency_ms(size), chain_latency_ms(size)  # warm both paths
        ours, theirs, atomic = [], [], []
        kinds = [(ours, durableflow_latency_ms), (theirs, chain_latency_ms)]
        if size == min(sizes):
            durableflow_atomic_latency_ms(size)
            kinds.append((atomic, durableflow_atomic_latency_ms))
        for i in range(n):
            shift = i % len(kinds)
            for bucket, measure in kinds[shift:] + kinds[:shift]:
                bucket.append(measure(size))
        samples["durableflow"][str(size)], samples["chain"][str(size)] = ours, theirs
        if atomic:
            samples["atomic"][str(size)] = atomic
    return {system: {size: summary(values) for size, values in by_size.items()} for system, by_size in samples.items()}


# Throughput: a batch started at once, timed to its last completion ----------------------------------


def durableflow_throughput(workflows: int, steps: int, queue: str | None = None) -> dict[str, Any]:
    """Also what the batch cost the database (PostgreSQL): write transactions and server CPU."""
    with Primary() as primary:
        started = time.perf_counter()
        ids = [durableflow.start("bench.steps", {"steps": steps}, queue=queue).id for _ in range(workflows)]
        # Executions finish roughly in the order they were started: wait for each in turn.
        for execution_id in ids:
            wait_until(
                lambda execution_id=execution_id: _completed(execution_id), timeout=600, interval=0.01, what="the batch"
            )
        seconds = time.perf_counter() - started
    return {**_rates(workflows, steps, seconds), "primary_per_workflow": primary.per(workflows)}


def chain_throughput(workflows: int, steps: int) -> dict[str, float]:
    started = time.perf_counter()
    results = [_chain(steps).apply_async() for _ in range(workflows)]
    for result in results:
        wait_until(result.ready, timeout=600, interval=0.01, what="the chains")
    return _rates(workflows, steps, time.perf_counter() - started)


def _rates(workflows: int, steps: int, seconds: float) -> dict[str, float]:
    return {"seconds": seconds, "workflows_per_s": workflows / seconds, "steps_per_s": workflows * steps / seconds}


# Starts: what a caller pays to start work, beside Celery's apply_async ---------------------------
#
# Both publish to a queue that no worker consumes, so nothing runs while they are timed; the
# messages are purged and the executions deleted afterwards (beat is not running: no sweep
# re-sends them meanwhile).

START_QUEUE = "bench-starts"


def _purge(queue: str) -> None:
    from celery import current_app

    with current_app.connection_for_write() as conn:
        conn.default_channel.queue_purge(queue)


def _ms(fn) -> float:
    started = time.perf_counter()
    fn()
    return (time.perf_counter() - started) * 1000


def starts(n: int, many: int) -> dict[str, Any]:
    """``start`` beside one ``apply_async`` (ms per call, taken in rotation one by one; also a
    keyed start and a start inside the caller's ``transaction.atomic()``), and ``start_many`` of
    ``many`` executions beside ``many`` ``apply_async`` calls (seconds)."""
    ids: list[str] = []

    def one_start() -> None:
        ids.append(durableflow.start("bench.steps", {"steps": 1}, queue=START_QUEUE).id)

    def one_send() -> None:
        chain_step.apply_async((0, 0), queue=START_QUEUE)

    def one_keyed() -> None:  # under a concurrency key: lock the key, count its runs, then insert
        ids.append(durableflow.start("bench.keyed", {"steps": 1, "key": uuid.uuid4().hex}, queue=START_QUEUE).id)

    def one_atomic() -> None:  # inside the caller's transaction: BEGIN with the INSERT, then COMMIT and the publish
        with transaction.atomic():
            ids.append(durableflow.start("bench.steps", {"steps": 1}, queue=START_QUEUE).id)

    out: dict[str, Any] = {"n": n, "many": many}
    try:
        one_start(), one_send(), one_keyed(), one_atomic()  # warm the paths
        ours, theirs, keyed, atomic = [], [], [], []
        for i in range(n):
            calls = [(ours, one_start), (theirs, one_send), (keyed, one_keyed), (atomic, one_atomic)]
            for bucket, call in calls[i % 4 :] + calls[: i % 4]:
                bucket.append(_ms(call))
        out["start_ms"], out["apply_async_ms"], out["keyed_start_ms"] = summary(ours), summary(theirs), summary(keyed)
        out["atomic_start_ms"] = summary(atomic)

        def sends() -> None:
            for _ in range(many):
                one_send()

        out["apply_async_many_s"] = _ms(sends) / 1000

        def start_many() -> None:
            ids.extend(e.id for e in durableflow.start_many("bench.steps", [{"steps": 1}] * many, queue=START_QUEUE))

        out["start_many_s"] = _ms(start_many) / 1000
    finally:
        _purge(START_QUEUE)
        Execution.objects.filter(pk__in=ids).delete()
    return out


def scheduled_ticks(n: int) -> dict[str, Any]:
    """A schedule's tick beside a plain ``start`` (ms per call, alternating one by one).

    The tick is what the ``durableflow.tick`` task runs for an every-second schedule, in the
    steady state: read its periodic task, look up the tick before (started), start this one.
    Each sample moves the tick's database clock on a second, so that each is a new tick.
    """
    from django_celery_beat.models import PeriodicTask

    from durableflow import operations, schedules
    from durableflow.orm import OrmStorage

    name, ids = "bench-ticks", []
    storage = OrmStorage()
    verbs = operations.engine(storage)
    durableflow.schedule(name, "bench.steps", {"steps": 1}, every=1)
    PeriodicTask.objects.filter(name=name).update(enabled=False)  # no beat is to send it

    def one_tick() -> None:
        storage.offset += timedelta(seconds=1)
        task = PeriodicTask.objects.select_related("interval", "crontab").get(name=name)
        started = verbs.tick(name, "bench.steps", {"steps": 1}, schedules.ticks_of(task), floor=task.start_time,
                             queue=START_QUEUE)  # fmt: skip
        ids.extend(execution.id for execution in started)

    def one_start() -> None:
        ids.append(durableflow.start("bench.steps", {"steps": 1}, queue=START_QUEUE).id)

    try:
        one_tick(), one_start()  # warm both paths (and the tick before the first measured one)
        ours, plain = [], []
        for i in range(n):
            pair = [(ours, one_tick), (plain, one_start)]
            for bucket, call in pair if i % 2 == 0 else reversed(pair):
                bucket.append(_ms(call))
        return {"n": n, "tick_ms": summary(ours), "start_ms": summary(plain)}
    finally:
        durableflow.unschedule(name)
        _purge(START_QUEUE)
        Execution.objects.filter(pk__in=ids).delete()


# Timers -----------------------------------------------------------------------------------------


def timers(count: int, low: float, high: float) -> dict[str, Any]:
    """Lateness of durable sleeps: wall clock at wake-up minus the recorded due time."""
    # Beat was just started: wait until a sweep has woken a first timer, so that the
    # measured ones do not wait for beat's start-up.
    canary = durableflow.start("bench.sleep", {"seconds": 0.5}).id
    wait_until(lambda: _completed(canary), timeout=60, interval=0.05, what="beat's first sweep")
    durations = [low + (high - low) * i / max(count - 1, 1) for i in range(count)]
    ids = [durableflow.start("bench.sleep", {"seconds": seconds}).id for seconds in durations]
    for execution_id in ids:
        wait_until(
            lambda execution_id=execution_id: _completed(execution_id),
            timeout=high + 60,
            interval=0.05,
            what="the timers",
        )
    lateness = []
    for execution_id in ids:
        due = StepRecord.objects.get(execution_id=execution_id, key="timer").meta["until"]
        woke = Execution.objects.values_list("result", flat=True).get(pk=execution_id)
        lateness.append(woke - datetime.fromisoformat(due).timestamp())
    return {
        "lateness_s": summary(lateness),
        "max_s": max(lateness),
        "min_s": min(lateness),
        "sleeps": count,
        "range_s": [low, high],
    }


# Memory -------------------------------------------------------------------------------------------


def memory(worker, queue: str, total: int, batch: int, steps: int) -> dict[str, Any]:
    """RSS of the worker's pool process after each batch of executions."""
    samples = []
    done = 0
    while done < total:
        ids = [durableflow.start("bench.steps", {"steps": steps}, queue=queue).id for _ in range(batch)]
        for execution_id in ids:
            wait_until(
                lambda execution_id=execution_id: _completed(execution_id),
                timeout=600,
                interval=0.01,
                what="a memory batch",
            )
        done += batch
        children = worker.children()
        if len(children) != 1:
            raise RuntimeError(f"expected one pool process, found {children}")
        samples.append({"executions": done, "rss_mb": psutil.Process(children[0]).memory_info().rss / 2**20})
    first, last = samples[0]["rss_mb"], samples[-1]["rss_mb"]
    settled = samples[len(samples) // 2]["rss_mb"] if len(samples) > 2 else first
    return {
        "samples": samples,
        "first_mb": first,
        "last_mb": last,
        "growth_mb": last - first,
        "growth_second_half_mb": last - settled,
        "p50_mb": percentile([s["rss_mb"] for s in samples], 50),
    }
