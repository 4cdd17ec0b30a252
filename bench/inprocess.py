"""Measurements that need no worker: the floor, per-step overhead, replay cost.

Deliveries run in this process exactly as a worker runs them (``operations.deliver``), on a
queue no worker consumes, so that only the delivery is timed.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import statistics
import time
from typing import Any

from django.db import connection
from django.test.utils import CaptureQueriesContext

import durableflow
from bench.stats import summary, timed_ms
from durableflow import operations
from durableflow.engine.journal import Journal
from durableflow.models import Execution

QUEUE = "bench-inprocess"


class Floor:
    """One committed single-row INSERT through the database's own driver, in autocommit."""

    def __init__(self) -> None:
        if connection.vendor == "postgresql":
            import psycopg

            self.conn = psycopg.connect(os.environ["DATABASE_URL"], autocommit=True)
        else:
            self.conn = sqlite3.connect(connection.settings_dict["NAME"], isolation_level=None)
            self.conn.execute("PRAGMA journal_mode=WAL")
            self.conn.execute("PRAGMA synchronous=NORMAL")
        self.conn.execute(
            "CREATE TABLE IF NOT EXISTS bench_floor (id INTEGER PRIMARY KEY, v TEXT)"
            if connection.vendor == "sqlite"
            else "CREATE TABLE IF NOT EXISTS bench_floor (id bigserial PRIMARY KEY, v text)"
        )

    def sample(self, n: int) -> list[float]:
        insert = (
            "INSERT INTO bench_floor (v) VALUES (%s)"
            if connection.vendor == "postgresql"
            else "INSERT INTO bench_floor (v) VALUES (?)"
        )
        return [timed_ms(lambda: self.conn.execute(insert, ("x",))) for _ in range(n)]

    def close(self) -> None:
        self.conn.close()


def _deliver_ms(steps: int, step_ms: list[float] | None = None) -> float:
    execution = durableflow.start("bench.steps", {"steps": steps}, queue=QUEUE)
    with _step_clock(step_ms):
        elapsed = timed_ms(lambda: operations.deliver(execution.id))
    _expect(execution.id, "completed")
    return elapsed


@contextlib.contextmanager
def _step_clock(step_ms: list[float] | None):
    """Record the time between consecutive step writes: each step's whole cost (workflow
    code, engine, the fenced write), one sample per step, comparable to one floor INSERT."""
    if step_ms is None:
        yield
        return
    original = Journal.write_step
    last: list[float] = []

    def timed_write(journal, record, *, new):
        original(journal, record, new=new)
        now = time.perf_counter()
        if last:
            step_ms.append((now - last[0]) * 1000)
        last[:] = [now]

    Journal.write_step = timed_write
    try:
        yield
    finally:
        Journal.write_step = original


def _expect(execution_id: str, status: str) -> None:
    found = Execution.objects.values_list("status", flat=True).get(pk=execution_id)
    if found != status:
        raise RuntimeError(f"benchmark execution {execution_id} is {found}, expected {status}")


def _xid() -> int | None:
    """The next transaction id PostgreSQL will assign: its growth counts write transactions."""
    if connection.vendor != "postgresql":
        return None
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_snapshot_xmax(pg_current_snapshot())::text::bigint")
        return cursor.fetchone()[0]


def _shape(steps: int) -> dict[str, Any]:
    """Queries and write transactions of one delivery of ``steps`` steps.

    Transaction ids are shared by the whole PostgreSQL cluster, so another session's writes
    can only add to the count: the least of five deliveries is this one's own.
    """
    shapes = []
    for _ in range(5):
        execution = durableflow.start("bench.steps", {"steps": steps}, queue=QUEUE)
        before = _xid()
        with CaptureQueriesContext(connection) as captured:
            operations.deliver(execution.id)
        after = _xid()
        queries = [q["sql"] for q in captured.captured_queries]
        shapes.append(
            {
                "queries": len(queries),
                "selects": sum(sql.startswith("SELECT") for sql in queries),
                "write_transactions": None if before is None else after - before,
            }
        )
    return min(shapes, key=lambda shape: shape["write_transactions"] or 0)


def step_overhead(sizes: list[int], repeats: int, floor_n: int) -> dict[str, Any]:
    """One round: floor samples and deliveries of each size, interleaved."""
    floor = Floor()
    try:
        floor_ms: list[float] = []
        step_ms: list[float] = []
        delivery_ms: dict[str, list[float]] = {str(s): [] for s in sizes}
        _deliver_ms(1)  # warm connections and prepared statements
        for _ in range(repeats):
            floor_ms += floor.sample(floor_n)
            for size in sizes:
                delivery_ms[str(size)].append(_deliver_ms(size, step_ms if size == max(sizes) else None))
    finally:
        floor.close()
    small, large = min(sizes), max(sizes)
    shapes = {str(small): _shape(small), str(large): _shape(large)}
    per_step = {
        key: (shapes[str(large)][key] - shapes[str(small)][key]) / (large - small)
        for key in ("queries", "selects", "write_transactions")
        if shapes[str(large)][key] is not None
    }
    return {
        "floor_ms": {**summary(floor_ms), "mean": statistics.fmean(floor_ms)},
        "step_ms": {**summary(step_ms), "mean": statistics.fmean(step_ms)},
        "delivery_ms": delivery_ms,
        "shape": shapes,
        "per_step": per_step,
    }


def replay(lengths: list[int], repeats: int) -> dict[str, Any]:
    """Live cost of N steps, then the cost of replaying a journal of N steps."""
    out: dict[str, Any] = {}
    for n in lengths:
        execution = durableflow.start("bench.replay", {"steps": n}, queue=QUEUE)
        live = timed_ms(lambda execution_id=execution.id: operations.deliver(execution_id))
        replays = []
        for _ in range(repeats):
            Execution.objects.filter(pk=execution.id).update(status="pending", wake_at=None)
            replays.append(timed_ms(lambda execution_id=execution.id: operations.deliver(execution_id)))
            _expect(execution.id, "waiting")
        out[str(n)] = {"live_ms": live, "replay_ms": summary(replays)}
    return out
