"""The structural cost of a step, counted in queries on the real database."""

from __future__ import annotations

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

import durableflow
from durableflow import operations

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
    assert len(journal_reads) == 1  # the journal is read once per delivery, whatever its length
    # claim (UPDATE ... RETURNING the execution), journal (SELECT), n step INSERTs, outcome
    # (UPDATE): nothing else, and no transaction blocks around the writes.
    assert len(queries) == n + 3, queries
    assert queries[0].startswith('UPDATE "durableflow_execution"') and "RETURNING" in queries[0]
    assert not any("SAVEPOINT" in sql or sql.startswith(("BEGIN", "COMMIT")) for sql in queries)
    assert not connection.in_atomic_block


def test_more_steps_add_only_step_writes(live_db):
    one, eleven = _delivery_queries(1), _delivery_queries(11)
    assert len(eleven) - len(one) == 10
