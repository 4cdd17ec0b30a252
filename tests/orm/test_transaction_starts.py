"""A start inside the caller's transaction, as the caller's path sees it: its statements, and
its delivery built while the transaction is open, published once with the commit and never
after a rollback.

On PostgreSQL the message is built while the INSERT is in flight, a transaction the start
opens sends its BEGIN with the INSERT, and the delivery is published while the server runs the
transaction's COMMIT (``durableflow.orm.backend``): the wire is watched with libpq's trace.
Elsewhere it is published once the commit is done.
"""

from __future__ import annotations

import tempfile
import threading
from contextlib import contextmanager
from typing import Iterator

import pytest
from django.db import DataError, connections, transaction
from django.test.utils import CaptureQueriesContext

import durableflow
from durableflow import dispatch
from durableflow.models import Execution
from durableflow.orm import db_alias
from tests.helpers import uid

NOBODY = "durableflow-test-nobody"  # a queue no worker consumes


@pytest.fixture
def connection(live_db):
    return connections[db_alias()]


@pytest.fixture
def postgres(connection):
    if connection.vendor != "postgresql":
        pytest.skip("PostgreSQL only: elsewhere the INSERT goes through a cursor")


@pytest.fixture
def path(connection, monkeypatch):
    """What the caller's path does, in order: ``("build", in_transaction, libpq status)`` for each
    message built, ``("publish", args, in_transaction, committed)`` for each one published (the
    publish really happens: to a queue no worker consumes)."""
    events: list[tuple] = []
    prepare, publish = dispatch.prepare, dispatch.publish

    def building(*args, **kwargs):
        status = None
        if connection.vendor == "postgresql":
            from psycopg import pq

            status = pq.TransactionStatus(connection.connection.pgconn.transaction_status).name
        events.append(("build", connection.in_atomic_block, status))
        return prepare(*args, **kwargs)

    def publishing(message):
        status = None
        if connection.vendor == "postgresql":
            from psycopg import pq

            status = pq.TransactionStatus(connection.connection.pgconn.transaction_status).name
        events.append(("publish", message.args, connection.in_atomic_block, status))
        return publish(message)

    monkeypatch.setattr(dispatch, "prepare", building)
    monkeypatch.setattr(dispatch, "publish", publishing)
    return events


def _seen_elsewhere(execution_id: str) -> bool:
    """Whether another connection (another thread's) sees the row: whether it is committed."""
    seen = []

    def look() -> None:
        try:
            seen.append(Execution.objects.filter(pk=execution_id).exists())
        finally:
            connections.close_all()

    thread = threading.Thread(target=look)
    thread.start()
    thread.join()
    return seen == [True]


def _kinds(captured: CaptureQueriesContext) -> list[str]:
    return [
        "INSERT execution" if sql.startswith('INSERT INTO "durableflow_execution"') else sql.split()[0]
        for sql in (query["sql"] for query in captured.captured_queries)
    ]


def test_a_start_inside_a_transaction_is_one_insert_then_one_publish_after_the_commit(connection, path):
    with CaptureQueriesContext(connection) as captured:
        with transaction.atomic():
            execution = durableflow.start("t.ping", queue=NOBODY)
            assert [event[0] for event in path] == ["build"]
            assert not _seen_elsewhere(execution.id)

    assert _kinds(captured) == ["BEGIN", "INSERT execution", "COMMIT"]
    assert [event[:2] for event in path] == [("build", True), ("publish", (execution.id,))]
    # Published with the commit: on PostgreSQL while the server runs the COMMIT (libpq: a command
    # in progress), elsewhere once it is done.
    assert path[1][2:] == (False, "ACTIVE" if connection.vendor == "postgresql" else None)
    assert _seen_elsewhere(execution.id)


def test_a_rolled_back_start_builds_its_message_and_publishes_nothing(connection, path):
    with pytest.raises(RuntimeError, match="the view failed"), transaction.atomic():
        execution = durableflow.start("t.ping", queue=NOBODY)
        raise RuntimeError("the view failed")

    assert [event[0] for event in path] == ["build"]
    assert not Execution.objects.filter(pk=execution.id).exists()


def test_a_start_with_a_key_inside_a_transaction_publishes_after_the_commit_and_a_repeat_nothing(connection, path):
    key = uid("key")
    with transaction.atomic():
        first = durableflow.start("t.ping", idempotency_key=key, queue=NOBODY)
        assert durableflow.start("t.ping", idempotency_key=key, queue=NOBODY).id == first.id
    assert [event[:2] for event in path] == [("build", True), ("publish", (first.id,))]
    assert path[1][2] is False


def test_on_postgresql_the_message_is_built_while_the_insert_is_in_flight(postgres, connection, path):
    with transaction.atomic():
        durableflow.start("t.ping", queue=NOBODY)  # the transaction's first statement: BEGIN with it
        durableflow.start("t.ping", queue=NOBODY)  # the transaction is open on the server already

    # libpq: a command in progress (the INSERT sent, its result not read yet).
    assert [event for event in path if event[0] == "build"] == [("build", True, "ACTIVE")] * 2
    assert [event[2:] for event in path if event[0] == "publish"] == [(False, "ACTIVE")] * 2


def test_on_postgresql_the_publish_goes_out_while_the_commit_runs(postgres, connection, path):
    connection.ensure_connection()
    with _round_trips(connection) as sent, transaction.atomic():
        execution = durableflow.start("t.ping", queue=NOBODY)
    # Two round trips, the publish made during the second (the COMMIT sent, its answer not read).
    assert sent == [["Parse BEGIN", "Parse INSERT", "Sync"], ["Query COMMIT"]]
    assert path[-1] == ("publish", (execution.id,), False, "ACTIVE")
    assert _seen_elsewhere(execution.id)


def test_a_start_in_a_savepoint_rolled_back_publishes_nothing_and_the_others_are_published(connection, path):
    with transaction.atomic():
        kept = durableflow.start("t.ping", queue=NOBODY)
        with pytest.raises(RuntimeError), transaction.atomic():
            dropped = durableflow.start("t.ping", queue=NOBODY)
            raise RuntimeError("the inner block failed")
    published = [event[1][0] for event in path if event[0] == "publish"]
    assert published == [kept.id]
    assert Execution.objects.filter(pk__in=[kept.id, dropped.id]).count() == 1


def test_on_postgresql_a_commit_that_fails_raises_djangos_error_and_its_delivery_finds_no_row(
    postgres, connection, path
):
    from django.db import IntegrityError

    from durableflow import operations

    with pytest.raises(IntegrityError), transaction.atomic():
        with connection.cursor() as cursor:  # a check the server makes at COMMIT only
            cursor.execute(
                "CREATE TEMPORARY TABLE deferred_check (id int UNIQUE DEFERRABLE INITIALLY DEFERRED) ON COMMIT DROP"
            )
            cursor.execute("INSERT INTO deferred_check VALUES (1), (1)")
        execution = durableflow.start("t.ping", queue=NOBODY)
    # Sent with the COMMIT, which failed: the row is not there, and a delivery of it is skipped.
    assert [event[:2] for event in path] == [("build", True), ("publish", (execution.id,))]
    assert not Execution.objects.filter(pk=execution.id).exists()
    assert operations.deliver(execution.id) == "skipped"
    # The same connection serves the next transaction.
    with transaction.atomic():
        after = durableflow.start("t.ping", queue=NOBODY)
    assert Execution.objects.get(pk=after.id).status == "pending"


def test_on_postgresql_a_start_that_opens_the_transaction_sends_its_begin_with_the_insert(postgres, connection):
    connection.ensure_connection()
    with transaction.atomic():
        with _round_trips(connection) as sent:
            durableflow.start("t.ping", queue=NOBODY)
            durableflow.start("t.ping", queue=NOBODY)
    assert sent == [
        ["Parse BEGIN", "Parse INSERT", "Sync"],  # one round trip: the BEGIN and the first INSERT
        ["Parse INSERT", "Sync"],  # the second start's: its INSERT alone
    ]


@contextmanager
def _round_trips(connection) -> Iterator[list[list[str]]]:
    """The messages the client sends while the block runs, one list per round trip (a ``Sync``
    or a simple ``Query`` ends one), read from libpq's trace."""
    from psycopg import pq

    pgconn = connection.connection.pgconn
    sent: list[list[str]] = []
    with tempfile.TemporaryFile(mode="w+") as trace:
        pgconn.trace(trace.fileno())
        pgconn.set_trace_flags(pq.Trace.SUPPRESS_TIMESTAMPS | pq.Trace.REGRESS_MODE)
        try:
            yield sent
        finally:
            pgconn.untrace()
        trace.seek(0)
        trip: list[str] = []
        for line in trace.read().splitlines():
            direction, _, kind, *rest = line.split("\t")
            if direction != "F":
                continue
            if kind == "Parse":  # Parse "<statement name>" "<text>" ...
                trip.append(f"Parse {rest[0].split(chr(34))[3].split()[0]}")
            elif kind in ("Sync", "Query"):
                if kind == "Sync":
                    trip.append("Sync")
                else:  # Query "<text>"
                    text = rest[0].split()[0].strip('"')
                    trip.append(f"Query {text}")
                sent.append(trip)
                trip = []


def test_the_begin_sent_with_the_insert_is_the_one_psycopg_would_send(postgres, connection):
    import psycopg

    connection.ensure_connection()
    raw = connection.connection
    try:
        with transaction.atomic():
            raw.isolation_level = psycopg.IsolationLevel.SERIALIZABLE  # before the server's BEGIN
            durableflow.start("t.ping", queue=NOBODY)
            with connection.cursor() as cursor:
                cursor.execute("SHOW transaction_isolation")
                assert cursor.fetchone()[0] == "serializable"
        with pytest.raises(Exception, match="read-only transaction"), transaction.atomic():
            raw.read_only = True
            durableflow.start("t.ping", queue=NOBODY)
    finally:
        raw.isolation_level = raw.read_only = None


@pytest.mark.parametrize("first", [True, False], ids=["opens-the-transaction", "in-an-open-one"])
def test_a_failed_insert_inside_a_transaction_raises_djangos_error_and_publishes_nothing(connection, path, first):
    queue = "q" * 300  # longer than the column: PostgreSQL refuses the row
    if connection.vendor != "postgresql":
        pytest.skip("SQLite does not check a column's length")
    with pytest.raises(DataError, match="too long"), transaction.atomic():
        if not first:
            Execution.objects.exists()
        durableflow.start("t.ping", queue=queue)
    assert [event[0] for event in path] == ["build"]
    assert not Execution.objects.filter(queue=queue).exists()
    # The same connection serves the next transaction.
    with transaction.atomic():
        after = durableflow.start("t.ping", queue=NOBODY)
    assert Execution.objects.get(pk=after.id).status == "pending"


@durableflow.workflow("ts.start-in-a-transactional-step")
def _starts_in_its_transaction(ctx, params):
    return ctx.step.transaction("start", lambda: durableflow.start("t.ping", queue=NOBODY).id)


def test_a_start_from_a_transactional_step_is_published_once_the_step_commits(connection, path):
    from durableflow import operations

    parent = durableflow.start("ts.start-in-a-transactional-step", queue=NOBODY)
    del path[:]  # the parent's own start, in autocommit
    assert operations.deliver(parent.id) == "completed"

    child = durableflow.result(parent.id)
    # Built inside the body (not refused: nothing is sent there), published after its commit.
    assert [event[:2] for event in path] == [("build", True), ("publish", (child,))]
    assert path[1][2] is False
