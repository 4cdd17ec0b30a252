"""A delivery's statements are prepared on PostgreSQL: parsed and planned once per connection.

Django connects with ``prepare_threshold=None`` (psycopg never prepares); durableflow's own
cursor asks for it (``durableflow.orm.sql.cursor``) unless ``PREPARED_STATEMENTS`` is False.
Django's own queries stay unprepared either way.
"""

from __future__ import annotations

import pytest
from django.db import connections
from django.test import override_settings
from django.test.utils import CaptureQueriesContext

import durableflow
from durableflow import operations
from durableflow.models import Execution
from durableflow.orm import db_alias

NOBODY = "durableflow-test-prepared"  # a queue no worker consumes: the delivery runs here


@pytest.fixture
def connection(live_db):
    connection = connections[db_alias()]
    if connection.vendor != "postgresql":
        pytest.skip("PostgreSQL only: SQLite has no server to prepare on")
    connection.close()  # a fresh connection: nothing prepared on it yet
    yield connection
    connection.close()


def _prepared(connection) -> list[str]:
    with connection.cursor() as cursor:
        cursor.execute("SELECT statement FROM pg_prepared_statements ORDER BY prepare_time")
        return [row[0] for row in cursor.fetchall()]


def _deliver(n: int) -> None:
    execution = durableflow.start("t.loop", {"n": n}, queue=NOBODY)
    assert operations.deliver(execution.id) == "completed"


def test_a_delivery_prepares_its_claim_step_write_and_outcome_once(connection):
    _deliver(3)
    prepared = _prepared(connection)
    assert [sql.split(" ", 2)[:2] for sql in prepared] == [
        ["UPDATE", '"durableflow_execution"'],  # the claim
        ["INSERT", "INTO"],  # the fenced step record
        ["UPDATE", '"durableflow_execution"'],  # the outcome
    ], prepared
    assert "lease_expires_at" in prepared[0] and "RETURNING" in prepared[0]
    assert prepared[1].startswith('INSERT INTO "durableflow_steprecord"')

    _deliver(5)  # more deliveries, more steps: the same three statements, run again
    assert _prepared(connection) == prepared


def test_django_queries_stay_unprepared(connection):
    _deliver(1)
    before = _prepared(connection)
    for _ in range(10):
        assert not Execution.objects.filter(pk="no-such-execution").exists()
    assert _prepared(connection) == before


def test_the_query_log_still_shows_each_statement(connection):
    _deliver(1)  # prepared already: the next delivery executes prepared statements
    execution = durableflow.start("t.loop", {"n": 2}, queue=NOBODY)
    with CaptureQueriesContext(connection) as captured:
        operations.deliver(execution.id)
    logged = [query["sql"] for query in captured.captured_queries]
    assert len(logged) == 4 and all(isinstance(sql, str) for sql in logged), logged
    assert logged[0].startswith('UPDATE "durableflow_execution"')
    assert logged[1].startswith('INSERT INTO "durableflow_steprecord"')


def test_prepared_statements_off_prepares_nothing(connection):
    with override_settings(DURABLEFLOW={"PREPARED_STATEMENTS": False}):
        _deliver(3)
        assert _prepared(connection) == []
        assert connection.connection.prepare_threshold is None  # Django's setting, untouched
