"""A database failure under a delivery, on real worker processes: never the workflow's.

A worker started with ``DURABLEFLOW_TEST_FAULTS`` carries out one planned failure per test
(``tests.testapp.faults``: on PostgreSQL its own connection is terminated and the real
operation fails on it; on SQLite the operation finds the database locked) at one of the
operations a delivery makes: the claim, a step write, a store change, an effect hold, a wait
registration, the outcome. ``t.faults`` catches ``Exception`` around every step and returns
what it caught.

The worker runs with the default lease (60 s) and each run must be done well before it could
expire: the faulted delivery gave its lease back and was sent again with back-off, it did not
wait for the sweep. A run that completed was never failed on the way: nothing moves a failed
run on but ``retry()``, which nobody calls here.
"""

from __future__ import annotations

import pytest
from django.db import connection

import durableflow
from durableflow.models import Execution
from tests.helpers import uid, wait_for, wait_status
from tests.testapp.faults import OPS, inject

DEFAULT_LEASE = 60


@pytest.fixture(scope="module")
def faulty(cluster, tmp_path_factory):
    """A worker (two pool processes) on its own queue that carries out the planned failures."""
    folder = tmp_path_factory.mktemp("faults")
    queue = uid("faults")
    env = {"DURABLEFLOW_TEST_FAULTS": str(folder), "DURABLEFLOW_TEST_LEASE_SECONDS": str(DEFAULT_LEASE)}
    worker = cluster.worker(queue, concurrency=2, env=env)
    try:
        yield queue, folder, worker
    finally:
        cluster.stop(worker)


@pytest.mark.parametrize("op", sorted(OPS))
def test_a_database_failure_on_a_worker_never_reaches_workflow_code(faulty, live_db, op):
    queue, folder, worker = faulty
    execution_id, store, effect = uid("faults"), uid("store"), uid("effect")
    plan = inject(folder, op, store if op == "write_store" else execution_id)

    durableflow.start("t.faults", {"store": store, "effect_id": effect}, execution_id=execution_id, queue=queue)
    durableflow.signal(execution_id, "go", "now")
    done = wait_status(execution_id, timeout=DEFAULT_LEASE / 2)

    assert not plan.exists(), f"{OPS[op]} was never made"
    assert done.result["caught"] == []
    assert {k: done.result[k] for k in ("one", "version", "go", "two")} == {"one": 1, "version": 1, "go": "now", "two": 2}
    assert done.result["receipt"] == {"receipt": effect}
    assert done.error is None
    if op == "claim":  # a claim that failed is made again at once, in the same delivery
        return
    if op == "write_store" and connection.vendor == "sqlite":
        # A locked database is transient: the store runs its transaction again itself.
        assert done.deliveries == 1
        return
    assert done.deliveries >= 2
    failed = f"execution {execution_id}: the database failed under the delivery"
    wait_for(lambda: worker.count_in_log(failed) >= 1, what="the worker to log the failure")


def test_a_step_body_s_own_database_error_still_fails_the_run_on_a_worker(faulty, live_db):
    queue, _, _ = faulty
    execution = durableflow.start("t.user-db-error", queue=queue)

    failed = wait_status(execution.id, "failed", timeout=DEFAULT_LEASE / 2)

    assert (failed.error["type"], failed.error["step"]) == ("django.db.utils.OperationalError", "query")
    assert Execution.objects.get(pk=execution.id).deliveries == 1
