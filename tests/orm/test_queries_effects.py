"""The structural cost of an effect step, counted in queries on the real database."""

from __future__ import annotations

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

import durableflow
from durableflow import operations
from tests.helpers import uid

EFFECT_TABLE = '"durableflow_effect"'


def _delivery_queries(n: int, prefix: str) -> list[str]:
    # A queue no worker consumes: this delivery runs here, in autocommit like a worker's.
    execution = durableflow.start("t.effect-loop", {"n": n, "prefix": prefix}, queue="query-count")
    with CaptureQueriesContext(connection) as captured:
        assert operations.deliver(execution.id) == "completed"
    assert durableflow.result(execution.id) == list(range(n))
    return [query["sql"] for query in captured.captured_queries]


@pytest.mark.parametrize("n", [1, 10])
def test_a_performed_effect_costs_five_single_statements(live_db, n):
    queries = _delivery_queries(n, uid("fx"))

    # Per step: begin (INSERT ... ON CONFLICT DO NOTHING), hold (a fenced UPDATE), settle
    # (UPDATE), the watches read (SELECT), the step record (INSERT); plus claim and outcome (a
    # first delivery reads no journal).
    assert len(queries) == 5 * n + 2, queries
    assert sum(sql.startswith(f"INSERT INTO {EFFECT_TABLE}") for sql in queries) == n
    assert sum(sql.startswith(f"UPDATE {EFFECT_TABLE}") for sql in queries) == 2 * n
    assert not any("SAVEPOINT" in sql or sql.startswith(("BEGIN", "COMMIT")) for sql in queries)


def test_an_effect_settled_before_costs_three(live_db):
    prefix = uid("fx")
    _delivery_queries(10, prefix)

    queries = _delivery_queries(10, prefix)

    # Per step: begin (an INSERT that changes nothing), the effect read, the step record; plus
    # claim and outcome.
    assert len(queries) == 3 * 10 + 2, queries
    assert not any(sql.startswith(f"UPDATE {EFFECT_TABLE}") for sql in queries)
