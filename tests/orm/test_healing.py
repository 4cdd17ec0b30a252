"""Every durableflow task heals the process's database connections before its work and after it,
and a delivery the database failed under is sent again with back-off.

The tasks run in this process (``Task.apply``: the same task class and call as on a worker,
without a broker), on connections broken the ways a worker meets them: terminated by the
server while idle (nobody knows yet), or known broken by the driver. Real workers under
repeated terminations: ``test_connection_faults_live.py``.
"""

from __future__ import annotations

import pytest
from celery import current_app
from django.db import OperationalError, connection, connections, transaction

import durableflow
from durableflow import dispatch, tasks
from durableflow.engine import faults
from durableflow.healing import heal
from durableflow.models import Execution
from durableflow.orm import OrmStorage
from tests.testapp.faults import terminate

NOBODY = "durableflow-test-healing"  # a queue no worker consumes: deliveries run here


def _postgres() -> None:
    if connection.vendor != "postgresql":
        pytest.skip("PostgreSQL only: an SQLite connection is a file; nothing drops it")


def _terminate_own_backend() -> None:
    terminate(connections[connection.alias])


def _known_broken() -> None:
    """A connection terminated, then used by a raw driver call (Django's error flag is not set)."""
    _terminate_own_backend()
    with pytest.raises(Exception):
        connection.connection.execute("SELECT 1")
    assert connection.connection.broken and not connection.errors_occurred


def test_heal_drops_a_connection_the_driver_knows_is_broken(live_db):
    _postgres()
    _known_broken()

    heal()

    assert connection.connection is None
    assert Execution.objects.filter(pk="none").count() == 0  # a new connection


def test_heal_keeps_a_working_connection(live_db):
    connection.close()  # a new one: the session's may be older than CONN_MAX_AGE by now, and obsolete
    connection.ensure_connection()
    raw = connection.connection

    heal()

    assert connection.connection is raw


def test_heal_leaves_a_connection_inside_a_transaction_to_its_owner(live_db):
    _postgres()
    with transaction.atomic():
        Execution.objects.filter(pk="none").exists()
        _known_broken()
        broken = connection.connection
        heal()
        assert connection.connection is broken  # closing it would end the transaction under its owner
        connection.set_rollback(True)
    # Django drops it when the rollback fails at the block's end.
    assert connection.connection is not broken
    assert Execution.objects.filter(pk="none").count() == 0


def test_every_durableflow_task_heals_around_its_work():
    registered = [current_app.tasks[name] for name in dispatch.TASKS]
    assert all(isinstance(task, tasks._Healed) for task in registered), registered


@pytest.mark.parametrize(
    "name, args",
    [(dispatch.SWEEP, ()), (dispatch.PRUNE, ("30d",)), (dispatch.RUN_ITEM, ("none", "none"))],
    ids=["sweep", "prune", "run_item"],
)
def test_a_task_runs_on_a_connection_the_last_one_left_broken(live_db, name, args):
    _postgres()
    _known_broken()

    result = current_app.tasks[name].apply(args)

    assert result.successful(), result.traceback


def test_a_sweep_that_met_a_dropped_connection_leaves_the_next_one_a_working_connection(live_db, monkeypatch):
    """The sweep that failed every second, forever, in the pool process that got it: no more.

    Without Django's health check (``CONN_HEALTH_CHECKS``), the first statement on a connection
    the server dropped while it was idle fails; ``heal()`` after the task drops it.
    """
    _postgres()
    _terminate_own_backend()
    monkeypatch.setattr(connections[connection.alias], "health_check_enabled", False)

    failed = tasks.sweep.apply()
    assert failed.failed() and isinstance(failed.result, OperationalError)

    assert tasks.sweep.apply().successful()


def test_with_health_checks_a_task_finds_a_dropped_connection_before_its_work(live_db, monkeypatch):
    """``heal()`` makes Django check the connection again before the next task's first ORM query."""
    _postgres()
    connection.ensure_connection()
    monkeypatch.setattr(connections[connection.alias], "health_check_enabled", True)
    assert tasks.sweep.apply().successful()
    _terminate_own_backend()

    assert tasks.sweep.apply().successful()


def test_a_delivery_on_a_connection_dropped_while_idle_claims_again_at_once(live_db):
    _postgres()
    execution = durableflow.start("t.steps", queue=NOBODY)
    _terminate_own_backend()

    assert tasks.deliver.apply((execution.id,)).get() == "completed"
    assert Execution.objects.get(pk=execution.id).deliveries == 1


def _failing(monkeypatch, op: str, times: int) -> list[int]:
    original, failed = getattr(OrmStorage, op), []

    def failing(self, *args, **kwargs):
        if len(failed) < times:
            failed.append(1)
            raise OperationalError("terminating connection due to administrator command")
        return original(self, *args, **kwargs)

    monkeypatch.setattr(OrmStorage, op, failing)
    return failed


def test_a_faulted_delivery_is_sent_again(live_db, monkeypatch):
    execution = durableflow.start("t.steps", queue=NOBODY)
    failed = _failing(monkeypatch, "insert_step", 2)

    # Applied eagerly, Celery runs a retry at once (a worker waits for its countdown).
    assert tasks.deliver.apply((execution.id,)).get() == "completed"

    assert len(failed) == 2
    done = Execution.objects.get(pk=execution.id)
    assert (done.status, done.deliveries, done.error) == ("completed", 3, None)


def test_a_delivery_that_keeps_failing_is_left_to_the_sweep_after_the_last_resend(live_db, monkeypatch):
    execution = durableflow.start("t.steps", queue=NOBODY)
    failed = _failing(monkeypatch, "insert_step", 1000)

    assert tasks.deliver.apply((execution.id,)).get() == faults.FAULT

    assert len(failed) == faults.MAX_RESENDS + 1
    left = Execution.objects.get(pk=execution.id)
    assert (left.status, left.lease_token, left.error) == ("running", None, None)  # the sweep's to send again


def test_a_faulted_item_task_is_sent_again(live_db, monkeypatch):
    execution = durableflow.start("t.faults-map", {"items": [3]}, queue=NOBODY)
    assert tasks.deliver.apply((execution.id,)).get() == "suspended"
    failed = _failing(monkeypatch, "record_item", 1)
    [key] = Execution.objects.get(pk=execution.id).steps.filter(kind="item").values_list("key", flat=True)

    assert tasks.run_item.apply((execution.id, key)).get() == "completed"
    assert len(failed) == 1
