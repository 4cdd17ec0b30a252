"""The database terminates the workers' connections again and again: nothing is lost, stuck or failed.

What a failover, a pooler restart, ``idle_session_timeout`` or a network blip does, on
PostgreSQL + Redis: every client backend of the test database (and only of it) is terminated
every 0.5-1.5 s for ``STORM`` seconds while 36 executions (started in three waves) run two
steps, then nap until just after the storm, then run three more, on a worker with two pool
processes (the session's beat sends the sweep every second). Once the terminations stop,
every execution must be completed within ``R`` = lease + sweep interval + margin: none failed,
none lost, each step recorded once, and nothing caught by the ``except Exception`` of the half
that catch (they report it to a file, outside the database). Run twice: with
``CELERY_DB_REUSE_MAX`` as the project recommends (Celery's own clean-up off: durableflow's
tasks heal their connections) and without it.

When the storm ends every execution naps: only the sweep can wake them, and every pool process
had its connection terminated. Without healing, each sweep failed on its broken connection in
every process, for good, and nothing ever ran again.

The margin covers the slowest recovery there is: a delivery whose connection was terminated,
then its lease's give-back too, the delivery sent again landing on the other pool process (which
waits out the lease: 4 s), then the sweep's stale re-send (the lease again, and a sweep), then
the nap's end and the last steps.
"""

from __future__ import annotations

import random
import threading
import time
from datetime import timedelta

import pytest
from django.db import DatabaseError, connection
from django.utils import timezone

import durableflow
from durableflow.models import Execution, StepRecord
from tests.helpers import uid, wait_for

STORM = 20.0  # seconds of terminations
WAVES, PER_WAVE, WAVE_GAP = 3, 12, 5.0
HOLD = 0.3  # each of the two steps before the nap
LEASE, SWEEP, MARGIN = 4.0, 1.0, 15.0  # tests/settings.py's lease and sweep
R = LEASE + SWEEP + MARGIN


class Terminator(threading.Thread):
    """Terminates every other client backend of this database at random intervals until stopped."""

    def __init__(self, seed: int) -> None:
        super().__init__(name="terminator", daemon=True)
        self.rng = random.Random(seed)
        self.stopped = threading.Event()
        self.rounds = 0
        self.terminated = 0

    def run(self) -> None:
        import psycopg

        db = connection.settings_dict
        with psycopg.connect(
            dbname=db["NAME"], user=db["USER"], password=db["PASSWORD"], host=db["HOST"], port=db["PORT"],
            autocommit=True,
        ) as own:  # fmt: skip
            while not self.stopped.wait(self.rng.uniform(0.5, 1.5)):
                rows = own.execute(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = current_database() "
                    "AND pid <> pg_backend_pid() AND backend_type = 'client backend'"
                ).fetchall()
                self.rounds += 1
                self.terminated += sum(1 for (done,) in rows if done)


def _retrying(read):
    """``read()``, again on a new connection while the terminations drop this process's one."""
    while True:
        try:
            return read()
        except DatabaseError:
            connection.close()
            time.sleep(0.05)


def _start(execution_id: str, queue: str, params: dict) -> None:
    # The same id again after a failure: a start whose INSERT did commit returns that execution.
    _retrying(lambda: durableflow.start("t.storm", params, execution_id=execution_id, queue=queue))


@pytest.fixture
def postgres_and_a_broker(live_db):
    from django.conf import settings

    if connection.vendor != "postgresql" or not settings.CELERY_BROKER_URL.startswith(("redis://", "amqp://")):
        pytest.skip("PostgreSQL + a network broker: terminating connections needs a database server")


@pytest.mark.parametrize("reuse", ["recommended", "unset"], ids=["CELERY_DB_REUSE_MAX", "no-reuse-max"])
def test_terminated_connections_lose_stick_and_fail_nothing(cluster, postgres_and_a_broker, reuse, tmp_path):
    queue, report = uid("storm"), tmp_path / "caught.txt"
    env = {"DURABLEFLOW_TEST_DB_REUSE_MAX": "unset"} if reuse == "unset" else {}
    # Also on the sweep's queue: this worker runs sweeps too (with the session's worker).
    worker = cluster.worker(f"{queue},durableflow", concurrency=2, env=env)
    terminator = Terminator(seed=24)
    ids = [uid("storm") for _ in range(WAVES * PER_WAVE)]
    try:
        began, calm_at = time.monotonic(), timezone.now() + timedelta(seconds=STORM)
        terminator.start()
        for wave in range(WAVES):
            wait_for(lambda: time.monotonic() - began >= wave * WAVE_GAP, interval=0.05)
            for number, execution_id in enumerate(ids[wave * PER_WAVE : (wave + 1) * PER_WAVE]):
                until = (calm_at + timedelta(seconds=1)).isoformat()  # a nap until just after the storm
                params = {"hold": HOLD, "until": until, "catch": number % 2 == 0, "report": str(report)}
                _start(execution_id, queue, params)
        wait_for(lambda: time.monotonic() - began >= STORM, interval=0.05, what="the storm to pass")
        terminator.stopped.set()
        terminator.join(timeout=10)
        calm = time.monotonic()
        connection.close()

        def drained():
            statuses = dict(Execution.objects.filter(pk__in=ids).values_list("id", "status"))
            if any(status == "failed" for status in statuses.values()):
                return statuses  # fail at once, below
            return statuses if list(statuses.values()).count("completed") == len(ids) else None

        statuses = wait_for(drained, timeout=R, interval=0.2, what=f"every execution to complete within R = {R} s")
        drain = time.monotonic() - calm
    finally:
        terminator.stopped.set()
        cluster.stop(worker)

    assert terminator.rounds >= 10 and terminator.terminated >= terminator.rounds
    assert len(statuses) == len(ids), "lost executions"
    assert sorted(set(statuses.values())) == ["completed"], statuses
    assert StepRecord.objects.filter(execution_id__in=ids).count() == len(ids) * 6  # each step and the nap, once
    assert not report.exists(), report.read_text()
    results = list(Execution.objects.filter(pk__in=ids).values_list("result", flat=True))
    assert results == [{"total": 5}] * len(ids)
    # The terminations did meet deliveries, and none of them ended as a task error.
    assert worker.count_in_log("the database failed under the delivery") >= 1
    assert "durableflow.deliver" not in "".join(
        line for line in worker.log().splitlines() if "raised unexpected" in line
    )
    print(f"storm: {terminator.rounds} rounds, {terminator.terminated} backends terminated; drained in {drain:.1f} s")
