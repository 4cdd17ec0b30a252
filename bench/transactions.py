"""Transactional steps: what ``ctx.step.transaction`` costs beside a ``run`` step and the floor.

Every step of the three workloads makes the same write, one UPDATE of a counter row:

- ``transaction``: ``ctx.step.transaction`` - BEGIN, the UPDATE, the fenced record INSERT, COMMIT;
- ``run``: ``ctx.step.run`` - the UPDATE commits on its own (autocommit), then the record: two commits;
- the floor: BEGIN, the same UPDATE, one single-row INSERT, COMMIT through the database's own
  driver - one commit for both the body's write and a record, with nothing else around it.

Per-step cost is the marginal one (the slope of delivery time between the smallest and the largest
workflow, in-process as a worker delivers); the floor is a mean per transaction. Ratios are
taken round by round in ``summarize``.
"""

from __future__ import annotations

import os
import sqlite3
import statistics
from typing import Any

from django.db import connection

import durableflow
from bench.stats import median, spread, summary, timed_ms

__all__ = ["step_cost", "summarize", "rows"]

QUEUE = "bench-inprocess"
TABLE = "bench_tx_counter"


def _bump() -> None:
    with connection.cursor() as cursor:
        cursor.execute(f"UPDATE {TABLE} SET n = n + 1 WHERE id = 1")


@durableflow.workflow("bench.tx-transaction")
def transaction_steps(ctx, params):
    for i in range(params["steps"]):
        ctx.step.transaction(f"t{i}", _bump)


@durableflow.workflow("bench.tx-run")
def run_steps(ctx, params):
    for i in range(params["steps"]):
        ctx.step.run(f"r{i}", _bump)


WORKFLOWS = {"transaction": "bench.tx-transaction", "run": "bench.tx-run"}


class TransactionFloor:
    """The same UPDATE and one INSERT in one transaction, through the driver (a fresh connection)."""

    def __init__(self) -> None:
        self.postgres = connection.vendor == "postgresql"
        if self.postgres:
            import psycopg

            self.conn = psycopg.connect(os.environ["DATABASE_URL"], autocommit=True)
            self.conn.execute("CREATE TABLE IF NOT EXISTS bench_tx_floor (id bigserial PRIMARY KEY, v text)")
        else:
            # As Django's connection is configured: WAL, and BEGIN IMMEDIATE.
            self.conn = sqlite3.connect(connection.settings_dict["NAME"], isolation_level=None)
            self.conn.execute("PRAGMA journal_mode=WAL")
            self.conn.execute("PRAGMA synchronous=NORMAL")
            self.conn.execute("CREATE TABLE IF NOT EXISTS bench_tx_floor (id INTEGER PRIMARY KEY, v TEXT)")

    def once(self) -> None:
        if self.postgres:
            with self.conn.transaction():
                self.conn.execute(f"UPDATE {TABLE} SET n = n + 1 WHERE id = 1")
                self.conn.execute("INSERT INTO bench_tx_floor (v) VALUES (%s)", ("x",))
        else:
            self.conn.execute("BEGIN IMMEDIATE")
            self.conn.execute(f"UPDATE {TABLE} SET n = n + 1 WHERE id = 1")
            self.conn.execute("INSERT INTO bench_tx_floor (v) VALUES (?)", ("x",))
            self.conn.execute("COMMIT")

    def sample(self, n: int) -> list[float]:
        return [timed_ms(self.once) for _ in range(n)]

    def close(self) -> None:
        self.conn.close()


def _ensure_table() -> None:
    with connection.cursor() as cursor:
        cursor.execute(f"CREATE TABLE IF NOT EXISTS {TABLE} (id integer PRIMARY KEY, n integer NOT NULL)")
        cursor.execute(f"DELETE FROM {TABLE}")
        cursor.execute(f"INSERT INTO {TABLE} (id, n) VALUES (1, 0)")


def _deliver_ms(kind: str, steps: int) -> float:
    # Imported here: the report (summarize, rows) runs in a process without Django's apps.
    from durableflow import operations
    from durableflow.models import Execution

    execution = durableflow.start(WORKFLOWS[kind], {"steps": steps}, queue=QUEUE)
    elapsed = timed_ms(lambda: operations.deliver(execution.id))
    status = Execution.objects.values_list("status", flat=True).get(pk=execution.id)
    if status != "completed":
        raise RuntimeError(f"benchmark execution {execution.id} ({kind}) is {status}")
    return elapsed


def step_cost(sizes: list[int], repeats: int, floor_n: int) -> dict[str, Any]:
    """One round: floor transactions and deliveries of each kind and size, interleaved."""
    _ensure_table()
    floor = TransactionFloor()
    try:
        floor_ms: list[float] = []
        delivery_ms = {kind: {str(size): [] for size in sizes} for kind in WORKFLOWS}
        for kind in WORKFLOWS:
            _deliver_ms(kind, 1)  # warm the connection and the prepared statements
        for _ in range(repeats):
            floor_ms += floor.sample(floor_n)
            for size in sizes:
                for kind in WORKFLOWS:
                    delivery_ms[kind][str(size)].append(_deliver_ms(kind, size))
    finally:
        floor.close()
    small, large = str(min(sizes)), str(max(sizes))
    marginal = {
        kind: (median(ms[large]) - median(ms[small])) / (max(sizes) - min(sizes)) for kind, ms in delivery_ms.items()
    }
    return {
        "floor_ms": {**summary(floor_ms), "mean": statistics.fmean(floor_ms)},
        "delivery_ms": delivery_ms,
        "marginal_ms": marginal,
    }


def summarize(rounds: list[dict[str, Any]]) -> dict[str, Any]:
    """Per-round ratios of the marginal costs, summarised over the rounds."""
    tx = [r["marginal_ms"]["transaction"] for r in rounds]
    run = [r["marginal_ms"]["run"] for r in rounds]
    floor = [r["floor_ms"]["mean"] for r in rounds]
    return {
        "transaction_ms": spread(tx),
        "run_ms": spread(run),
        "floor_ms": spread(floor),
        "transaction_over_run": spread([a / b for a, b in zip(tx, run, strict=True)]),
        "transaction_over_floor": spread([a / b for a, b in zip(tx, floor, strict=True)]),
    }


def rows(out: dict[str, Any]) -> list[tuple[str, dict[str, float], str]]:
    """The lines of the printed table: (label, stats, unit)."""
    return [
        ("transactional step (UPDATE + record, one commit)", out["transaction_ms"], " ms"),
        ("run step doing the same UPDATE (two commits)", out["run_ms"], " ms"),
        ("floor: UPDATE + INSERT in one driver transaction", out["floor_ms"], " ms"),
        ("transactional step / run step", out["transaction_over_run"], "x"),
        ("transactional step / floor", out["transaction_over_floor"], "x"),
    ]
