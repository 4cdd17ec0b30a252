"""The structural cost of a step, counted in queries on the real database."""

from __future__ import annotations

import pytest
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext

import durableflow
from durableflow import operations
from tests.helpers import uid

STEP_TABLE = '"durableflow_steprecord"'


def _delivery_queries(n: int) -> list[str]:
    # A queue no worker consumes: this delivery runs here, in autocommit like a worker's.
    execution = durableflow.start("t.loop", {"n": n}, queue="query-count")
    with CaptureQueriesContext(connection) as captured:
        assert operations.deliver(execution.id) == "completed"
    assert durableflow.result(execution.id) == sum(range(n))
    return [query["sql"] for query in captured.captured_queries]


@pytest.mark.parametrize("n", [1, 10, 50])
def test_a_run_step_costs_one_single_statement_write_and_no_reads(live_db, n):
    queries = _delivery_queries(n)

    step_writes = [sql for sql in queries if sql.startswith(f"INSERT INTO {STEP_TABLE}")]
    journal_reads = [sql for sql in queries if sql.startswith("SELECT") and f"FROM {STEP_TABLE}" in sql]
    assert len(step_writes) == n
    assert journal_reads == []  # a first delivery: the claim said there is no journal yet
    # claim (UPDATE ... RETURNING the execution), n step INSERTs, outcome (UPDATE): nothing
    # else, and no transaction blocks around the writes.
    assert len(queries) == n + 2, queries
    assert queries[0].startswith('UPDATE "durableflow_execution"') and "RETURNING" in queries[0]
    assert not any("SAVEPOINT" in sql or sql.startswith(("BEGIN", "COMMIT")) for sql in queries)
    assert not connection.in_atomic_block


def _synchronous_commit() -> str:
    with connection.cursor() as cursor:
        cursor.execute("SHOW synchronous_commit")
        return cursor.fetchone()[0]


def test_only_the_claim_commits_without_waiting_for_the_disk(live_db):
    if connection.vendor != "postgresql":
        pytest.skip("SQLite in WAL mode does not sync each commit")
    before = _synchronous_commit()
    queries = _delivery_queries(2)
    # Local to the claim's transaction: the step records and the outcome wait for the disk.
    assert "set_config('synchronous_commit', 'off', true)" in queries[0]
    assert not any("synchronous_commit" in sql for sql in queries[1:])
    assert _synchronous_commit() == before == "on"


def test_a_later_delivery_reads_the_journal_once(live_db):
    execution = durableflow.start("t.wait-signal", queue="query-count")
    assert operations.deliver(execution.id) == "suspended"
    durableflow.signal(execution.id, "go", "now")
    with CaptureQueriesContext(connection) as captured:
        assert operations.deliver(execution.id) == "completed"
    assert durableflow.result(execution.id) == "now"
    queries = [query["sql"] for query in captured.captured_queries]
    assert len([sql for sql in queries if sql.startswith("SELECT") and f"FROM {STEP_TABLE}" in sql]) == 1, queries


def test_more_steps_add_only_step_writes(live_db):
    one, eleven = _delivery_queries(1), _delivery_queries(11)
    assert len(eleven) - len(one) == 10


def test_a_start_is_one_insert_in_autocommit_and_inside_a_transaction(live_db):
    key = uid("start")
    with CaptureQueriesContext(connection) as alone:
        durableflow.start("t.ping", queue="query-count")
    with CaptureQueriesContext(connection) as inside, transaction.atomic():
        first = durableflow.start("t.ping", idempotency_key=key, queue="query-count")
        # A repeat reads the first execution by its key; no savepoint, and the transaction goes on.
        assert durableflow.start("t.ping", idempotency_key=key, queue="query-count").id == first.id
        durableflow.start("t.ping", queue="query-count")

    assert _kinds(alone) == ["INSERT execution"]
    assert _kinds(inside) == ["BEGIN", "INSERT execution", "INSERT execution", "SELECT", "INSERT execution", "COMMIT"]


def test_start_many_is_one_insert_per_parameter_limit(live_db):
    with CaptureQueriesContext(connection) as captured:
        executions = durableflow.start_many("t.ping", [None] * 100, queue="query-count")

    assert len({e.id for e in executions}) == 100
    # PostgreSQL takes 65,535 parameters a statement, Django's SQLite backend 999.
    inserts = ["INSERT execution"] * (1 if connection.vendor == "postgresql" else 2)
    assert _kinds(captured) == ["BEGIN", *inserts, "COMMIT"]


def _kinds(captured: CaptureQueriesContext) -> list[str]:
    return [
        "INSERT execution" if sql.startswith('INSERT INTO "durableflow_execution"') else sql.split()[0]
        for sql in (query["sql"] for query in captured.captured_queries)
    ]


@durableflow.workflow("t.query-patches")
def _patches(ctx, params):
    return sum(ctx.patched(f"p{i}") for i in range(params["n"]))


@pytest.mark.parametrize("n", [1, 10])
def test_a_patch_marker_costs_what_a_run_step_costs(live_db, n):
    execution = durableflow.start("t.query-patches", {"n": n}, queue="query-count")
    with CaptureQueriesContext(connection) as captured:
        assert operations.deliver(execution.id) == "completed"
    queries = [query["sql"] for query in captured.captured_queries]

    assert durableflow.result(execution.id) == n
    assert len([sql for sql in queries if sql.startswith(f"INSERT INTO {STEP_TABLE}")]) == n
    assert len(queries) == n + 2, queries  # the claim, one INSERT per marker, the outcome


def _rate_limited_queries(steps: int) -> list[str]:
    execution = durableflow.start("t.rate-limited", {"tag": uid("q"), "run": 0, "steps": steps}, queue="query-count")
    with CaptureQueriesContext(connection) as captured:
        assert operations.deliver(execution.id) == "completed"
    return [query["sql"] for query in captured.captured_queries]


def test_a_rate_limited_step_admitted_at_once_costs_a_few_statements_more(live_db):
    one, three = _rate_limited_queries(1), _rate_limited_queries(3)

    # Per step: its body's INSERT (a marker), its record's INSERT, and the admission's transaction:
    # BEGIN, the key's lock (PostgreSQL: SQLite's BEGIN IMMEDIATE serialises writers already), the
    # lease with the step's admission, the clock with two sums, the admission's INSERT, COMMIT.
    around = 3 if connection.vendor == "postgresql" else 2
    admission = around + 3
    assert (len(three) - len(one)) == 2 * (2 + admission), one
    assert len(one) == 2 + 2 + admission, one  # and the claim and the outcome
    assert sum(sql.startswith('INSERT INTO "durableflow_ratelimitadmission"') for sql in one) == 1
