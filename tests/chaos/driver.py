"""The chaos driver: the stack's private servers, two workers of two pool processes, one beat.

The stack (``tests/chaos/backends.py``) is PostgreSQL + Redis, PostgreSQL + RabbitMQ (both
servers private, started here) or the embedded default (a SQLite file and the
``filesystem://`` broker in a temporary folder: nothing to start). ``Chaos`` owns everything
it starts and stops all of it (by process id, never by name). The test process starts
executions through durableflow itself (so its own connection meets the faults too, and
retries), and reads the journal and the ledger in plain SQL on a connection of its own
(``tests/chaos/sql.py``).

Timing: the workers run with a ``LEASE`` of 10 s and beat sends the sweep every ``SWEEP``
second; once the faults stop, every execution must be finished within ``R`` = lease + sweep +
``MARGIN``. The margin covers the slowest path there is: a delivery lost with its broker or its
process, found stale by the sweep only once its lease expired, sent again, then a 1 s nap and
the steps after it.
"""

from __future__ import annotations

import os
import random
import time
from dataclasses import dataclass, field
from pathlib import Path

from tests.chaos import sql
from tests.chaos.backends import Backend
from tests.chaos.services import PrivatePostgres, PrivateRabbitMQ, PrivateRedis
from tests.cluster import ROOT, Cluster, Process

LEASE, SWEEP, MARGIN = 10.0, 1.0, 20.0
R = LEASE + SWEEP + MARGIN
TERMINAL = ("completed", "failed", "cancelled", "compensated", "compensation_failed")


@dataclass(frozen=True)
class Size:
    """How much one scenario does: executions per scenario, and seeds per scenario."""

    runs: int
    seeds: tuple[int, ...]


TIERS = {"smoke": Size(runs=12, seeds=(24,)), "full": Size(runs=24, seeds=(24, 25, 26))}


@dataclass
class Outcome:
    """What a scenario started and did: the ids, what each may end as, and the faults injected."""

    ids: list[str] = field(default_factory=list)
    expect: dict[str, tuple[str, ...]] = field(default_factory=dict)  # id -> the statuses it may end in
    codes: dict[str, tuple[str | None, ...]] = field(default_factory=dict)  # id -> the error codes allowed
    store: str | None = None
    faults: dict[str, int] = field(default_factory=dict)
    calm_at: float = 0.0  # monotonic time the faults stopped
    # fault name -> (query, args): a count read once the runs drained (what a run did to itself)
    tallies: dict[str, tuple[str, list]] = field(default_factory=dict)

    def add(self, ids: list[str], statuses: tuple[str, ...] = ("completed",), codes=(None,)) -> None:
        self.ids.extend(ids)
        for execution_id in ids:
            self.expect[execution_id] = statuses
            self.codes[execution_id] = codes

    def count(self, fault: str, n: int = 1) -> None:
        self.faults[fault] = self.faults.get(fault, 0) + n

    def tally(self, sql) -> None:
        for fault, (query, args) in self.tallies.items():
            self.count(fault, sql(query, args)[0][0])


class Chaos:
    """The cluster under test and its services."""

    def __init__(self, log_dir: Path, backend: Backend, db: dict, broker_port: int | None):
        self.log_dir = log_dir
        self.backend = backend
        self.db = db
        self.postgres = PrivatePostgres(int(db["PORT"]), log_dir) if "postgresql" in backend.offers else None
        brokers = {"redis": PrivateRedis, "rabbitmq": PrivateRabbitMQ}
        self.broker = brokers[backend.name](broker_port, log_dir) if backend.name in brokers else None
        self.sql = sql.PostgresSql(db) if self.postgres else sql.SqliteSql(db["NAME"])
        self.env = {
            **os.environ,
            "DJANGO_SETTINGS_MODULE": "tests.settings",
            "PYTHONPATH": str(ROOT),
            "DURABLEFLOW_TEST_LEASE_SECONDS": str(LEASE),
        }
        self.cluster = Cluster(self.env, log_dir)
        self.workers: list[Process] = []
        self.beats: list[Process] = []

    # Services and processes -------------------------------------------------------------------

    def start_services(self) -> None:
        import psycopg

        if self.broker is not None:
            self.broker.start()
        if self.postgres is None:
            return  # SQLite: migrate creates the file
        self.postgres.start()
        with psycopg.connect(host="127.0.0.1", port=self.db["PORT"], user="postgres", dbname="postgres",
                             autocommit=True) as admin:  # fmt: skip
            admin.execute(f'CREATE DATABASE "{self.db["NAME"]}"')

    def ensure(self, workers: int = 2, beats: int = 1) -> None:
        """Bring the cluster back to ``workers`` live workers and ``beats`` beats."""
        for process in [*self.workers, *self.beats]:
            if not process.alive():
                self.cluster.stop(process)
        self.workers = [p for p in self.workers if p.alive()]
        self.beats = [p for p in self.beats if p.alive()]
        while len(self.workers) < workers:
            self.workers.append(self.cluster.worker("durableflow", concurrency=2))
        while len(self.beats) < beats:
            self.beats.append(self.cluster.beat())
        while len(self.beats) > beats:
            self.cluster.stop(self.beats.pop())

    def restart_worker(self, worker: Process) -> Process:
        self.cluster.stop(worker)
        self.workers.remove(worker)
        replacement = self.cluster.worker("durableflow", concurrency=2)
        self.workers.append(replacement)
        return replacement

    def pool_children(self) -> dict[int, Process]:
        return {pid: worker for worker in self.workers for pid in worker.children()}

    def stop(self) -> None:
        self.cluster.stop_all()
        self.workers, self.beats = [], []
        self.sql.close()
        if self.postgres is not None:
            self.postgres.stop(keep_log=self.log_dir)
        if self.broker is not None:
            self.broker.stop()

    # Executions ---------------------------------------------------------------------------------

    def start(self, prefix: str, n: int, workflow: str = "chaos.flow", **params) -> list[str]:
        """Start ``n`` executions named ``<prefix>-<i>``; a start that failed on a dropped
        connection is retried with the same id (a start that did commit returns that one)."""
        from django.db import DatabaseError, connection

        import durableflow

        ids = [f"{prefix}-{i}" for i in range(n)]
        for execution_id in ids:
            while True:
                try:
                    durableflow.start(workflow, params, execution_id=execution_id)
                    break
                except DatabaseError:
                    connection.close()
                    time.sleep(0.05)
        return ids

    def statuses(self, ids: list[str]) -> dict[str, str]:
        return dict(self.sql(f"SELECT id, status FROM durableflow_execution WHERE {self.sql.among('id')}", [ids]))

    def drain(self, ids: list[str], timeout: float = R) -> float | None:
        """Seconds until every one of ``ids`` is finished (``None``: not within ``timeout``)."""
        began = time.monotonic()
        while time.monotonic() - began <= timeout:
            statuses = self.statuses(ids)
            if len(statuses) == len(ids) and all(status in TERMINAL for status in statuses.values()):
                return time.monotonic() - began
            time.sleep(0.2)
        return None

    def held_by(self, ids: list[str], pids: list[int]) -> int:
        """How many of ``ids`` are running under a lease held by one of ``pids``."""
        rows = self.sql(
            f"SELECT lease_holder FROM durableflow_execution WHERE {self.sql.among('id')} AND status = 'running' "
            "AND lease_holder IS NOT NULL",
            [ids],
        )
        return sum(1 for (holder,) in rows if int(holder.rsplit(" ", 2)[1]) in pids)  # "host pid started"

    def running_body_pid(self, within: float = 0.4) -> int | None:
        """A pool process whose step body began in the last ``within`` seconds (so still runs)."""
        children = self.pool_children()
        rows = self.sql(
            f"SELECT pid FROM testapp_chaosledger WHERE kind = 'body' AND at > {self.sql.seconds_ago(within)} "
            "ORDER BY at DESC"
        )
        for (pid,) in rows:
            if pid in children:
                return pid
        return None


def seeded(seed: int, scenario: str) -> random.Random:
    return random.Random(f"{seed}:{scenario}")
