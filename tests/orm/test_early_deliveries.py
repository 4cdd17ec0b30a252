"""A start publishes its delivery while its INSERT commits (PostgreSQL, outside a transaction),
so a delivery may arrive before its row: it waits for the row a little, then claims it.

The overlap is observed where it happens (the INSERT still in flight when the message is
published); the late row is made late on purpose (its INSERT held behind a lock, or written from
inside the delivery's first pause) and the deliveries are counted.
"""

from __future__ import annotations

import threading
from types import SimpleNamespace

import psycopg
import pytest
from django.db import DataError, connections
from django.test.utils import CaptureQueriesContext

import durableflow
from durableflow import dispatch, operations
from durableflow.engine.memory import InMemoryStorage
from durableflow.engine.verbs import Engine
from durableflow.models import Execution
from durableflow.orm import core, db_alias
from durableflow.registry import registry
from tests.helpers import uid, wait_for, wait_status

NOBODY = "durableflow-test-nobody"  # a queue no worker consumes


@pytest.fixture
def postgres(live_db):
    if connections[db_alias()].vendor != "postgresql":
        pytest.skip("PostgreSQL only: elsewhere a start writes its row, then sends its delivery")


@pytest.fixture
def pauses(monkeypatch):
    """The pauses a delivery takes while it waits for a row, recorded instead of slept;
    ``pauses.on_first`` runs at the first one."""

    class Pauses(list):
        on_first = None

    taken = Pauses()

    def pause(seconds: float) -> None:
        taken.append(seconds)
        if len(taken) == 1 and taken.on_first is not None:
            taken.on_first()

    monkeypatch.setattr(core, "time", SimpleNamespace(sleep=pause, monotonic=core.time.monotonic))  # the storage's
    return taken


def test_a_start_publishes_its_delivery_while_its_insert_is_in_flight(postgres, monkeypatch):
    connection = connections[db_alias()]
    seen = []
    publish = dispatch.publish

    def publishing(message):
        # The INSERT was sent and its result not read yet: libpq reports a command in progress.
        seen.append((message.task, message.args, connection.connection.pgconn.transaction_status))
        return publish(message)

    monkeypatch.setattr(dispatch, "publish", publishing)
    with CaptureQueriesContext(connection) as queries:
        execution = durableflow.start("t.ping", queue=NOBODY)

    assert seen == [(dispatch.DELIVER, (execution.id,), psycopg.pq.TransactionStatus.ACTIVE)]
    assert [query["sql"].split()[:3] for query in queries.captured_queries] == [
        ["INSERT", "INTO", f'"{Execution._meta.db_table}"']
    ]
    stored = Execution.objects.get(pk=execution.id)
    assert (stored.status, stored.queue, stored.created_at) == ("pending", NOBODY, execution.created_at)


def test_a_start_inside_a_transaction_sends_nothing_before_the_commit(postgres, monkeypatch):
    from django.db import transaction

    sent = []
    monkeypatch.setattr(dispatch, "publish", lambda message: sent.append(message.args) or True)
    with transaction.atomic():
        execution = durableflow.start("t.ping", queue=NOBODY)
        assert sent == []
    assert sent == [(execution.id,)]


def test_a_failed_insert_raises_djangos_error_writes_nothing_and_the_connection_goes_on(postgres):
    queue = "q" * 300  # longer than the column: PostgreSQL refuses the row
    with pytest.raises(DataError, match="too long"):
        durableflow.start("t.ping", queue=queue)
    assert not Execution.objects.filter(queue=queue).exists()
    # The same connection serves the next start and an ordinary query.
    after = durableflow.start("t.ping", queue=NOBODY)
    assert Execution.objects.get(pk=after.id).status == "pending"


def test_a_delivery_that_finds_no_row_waits_and_claims_it_when_it_arrives(postgres, pauses):
    execution_id = uid("late")
    pauses.on_first = lambda: _start_from_another_thread(execution_id)

    assert operations.deliver(execution_id) == "completed"

    assert len(pauses) == 1
    done = Execution.objects.get(pk=execution_id)
    assert (done.status, done.deliveries, done.result) == ("completed", 1, "pong")


def _start_from_another_thread(execution_id: str) -> None:
    """The row arrives while the delivery pauses: committed by another connection."""
    thread = threading.Thread(target=_start_named, args=(execution_id,))
    thread.start()
    thread.join()


def _start_named(execution_id: str) -> None:
    try:
        durableflow.start("t.ping", execution_id=execution_id, queue=NOBODY)
    finally:
        connections.close_all()


def test_a_delivery_for_a_row_that_never_comes_gives_up_after_its_pauses(postgres, pauses):
    execution_id = uid("never")
    assert operations.deliver(execution_id) == "skipped"
    assert tuple(pauses) == core.ARRIVAL_PAUSES
    assert 0.5 < sum(pauses) < 2
    assert not Execution.objects.filter(pk=execution_id).exists()


def test_a_delivery_of_a_row_that_is_there_but_not_runnable_does_not_wait(postgres, pauses):
    execution = durableflow.start("t.ping", queue=NOBODY)
    assert operations.deliver(execution.id) == "completed"
    assert operations.deliver(execution.id) == "skipped"  # finished: nothing to do, at once
    assert pauses == []
    assert Execution.objects.get(pk=execution.id).deliveries == 1


def test_in_memory_deliveries_never_wait_for_a_row(pauses):
    engine = Engine(InMemoryStorage(), registry)
    assert engine.deliver("nowhere") == "skipped"
    assert pauses == []


@pytest.mark.integration
def test_a_worker_runs_a_delivery_that_arrived_before_its_row_once(postgres, workers):
    """The INSERT is held behind a lock (its parent row locked FOR UPDATE: the foreign key
    check waits), so the real worker takes the message while the row is not there."""
    queue = uid("q")
    worker = workers(queue)
    parent = durableflow.start("t.ping", queue=NOBODY)
    settings = connections[db_alias()].get_connection_params()
    for name in ("cursor_factory", "context"):
        settings.pop(name, None)
    holder = psycopg.connect(**settings)
    started: list = []
    try:
        holder.execute(f"SELECT 1 FROM {Execution._meta.db_table} WHERE id = %s FOR UPDATE", [parent.id])
        starting = threading.Thread(target=_start_child, args=(parent.id, queue, started))
        starting.start()
        # The message left before the INSERT could commit; the worker took it and found no row.
        wait_for(lambda: worker.count_in_log("delivery early: execution"), what="the delivery to wait for its row")
        assert _waiting_for_lock(holder)
        assert started == []  # the start is still waiting for its INSERT
    finally:
        holder.rollback()
        holder.close()
    starting.join(timeout=30)
    (child_id,) = started
    done = wait_status(child_id, timeout=60)
    assert done.deliveries == 1
    assert worker.count_in_log("Task durableflow.deliver") == 2  # received, then succeeded
    assert "succeeded in" in worker.log() and "'completed'" in worker.log()
    assert "delivery skipped" not in worker.log()


def _start_child(parent_id: str, queue: str, started: list) -> None:
    try:
        execution, _ = operations.engine().start("t.ping", parent_id=parent_id, queue=queue)
        started.append(execution.id)
    finally:
        connections.close_all()


def _waiting_for_lock(holder) -> bool:
    row = holder.execute(
        "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE 'INSERT INTO%%'"
    ).fetchone()
    return row[0] >= 1


def test_on_sqlite_a_start_writes_its_row_before_it_sends_and_deliveries_do_not_wait(live_db, monkeypatch, pauses):
    if connections[db_alias()].vendor != "sqlite":
        pytest.skip("the embedded default's own path (PostgreSQL's is above)")
    visible = []
    publish = dispatch.publish

    def publishing(message):
        visible.append(Execution.objects.filter(pk=message.args[0]).exists())
        return publish(message)

    monkeypatch.setattr(dispatch, "publish", publishing)
    execution = durableflow.start("t.ping", queue=NOBODY)
    assert visible == [True]
    assert operations.deliver(uid("never")) == "skipped"
    assert pauses == []
    assert operations.deliver(execution.id) == "completed"
