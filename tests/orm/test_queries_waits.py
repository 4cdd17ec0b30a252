"""What waking a run costs, counted in statements and transactions on the real database: an
event, a signal and a token completion given to a waiting run, the woken run's delivery, and a
parent that invokes a child which completes within its delivery."""

from __future__ import annotations

import json
import re

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

import durableflow
from durableflow import operations
from durableflow.models import Execution
from durableflow.orm import backend
from durableflow.orm.satisfying import SatisfyStatements
from tests.helpers import uid

QUEUE = "query-count"  # no worker consumes it: each delivery runs here, in autocommit like a worker's


def _waiting(workflow: str, params: dict) -> str:
    execution = durableflow.start(workflow, params, queue=QUEUE)
    assert operations.deliver(execution.id) == "suspended"
    return execution.id


class _Pipelines:
    """Counts the pipelines sent (each one round trip, and outside a transaction one transaction)."""

    def __init__(self, monkeypatch):
        self.count = 0
        real = backend.pipeline

        def counted(connection):
            self.count += 1
            return real(connection)

        monkeypatch.setattr(backend, "pipeline", counted)


def _xmins(execution_id: str, key: str) -> set[int]:
    """The transactions that last wrote the rows a wake-up writes: the waiter, the step record,
    the execution and the event (the row's ``xmin``: immune to what other sessions write)."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT w.xmin::text::bigint, r.xmin::text::bigint, x.xmin::text::bigint, e.xmin::text::bigint "
            "FROM durableflow_waiter w JOIN durableflow_steprecord r ON r.execution_id = w.execution_id "
            "AND r.key = w.key JOIN durableflow_execution x ON x.id = w.execution_id "
            "JOIN durableflow_event e ON e.id = w.event_id WHERE w.execution_id = %s AND w.key = %s",
            [execution_id, key],
        )
        return set(cursor.fetchone())


def _wake(send, monkeypatch) -> tuple[int, list[str], int]:
    pipelines = _Pipelines(monkeypatch)
    with CaptureQueriesContext(connection) as captured:
        satisfied = send()
    return satisfied, [query["sql"] for query in captured.captured_queries], pipelines.count


def _postgres_only():
    if connection.vendor != "postgresql":
        pytest.skip("one round trip is PostgreSQL's (SQLite runs the same steps in one IMMEDIATE transaction)")


def test_an_event_to_a_waiting_run_is_two_statements_in_one_round_trip_and_one_transaction(live_db, monkeypatch):
    _postgres_only()
    key = uid("ev")
    execution_id = _waiting("t.wait-event", {"match": {"k": key}})

    satisfied, queries, pipelines = _wake(lambda: durableflow.send_event("t.event", {"k": key}), monkeypatch)

    assert satisfied == 1
    # The lock its waiters' registrars take, then one statement: the event stored, the waiter
    # taken, the wait's record completed, the run woken.
    assert len(queries) == 2, queries
    assert queries[0].startswith("SELECT pg_advisory_xact_lock")
    assert queries[1].startswith('WITH owner AS') or queries[1].startswith("WITH event AS")
    assert pipelines == 1  # both in one round trip, one transaction
    assert len(_xmins(execution_id, "event")) == 1  # everything it wrote, written by one commit
    assert Execution.objects.get(pk=execution_id).status == "pending"


@pytest.mark.parametrize("kind", ["signal", "token"])
def test_a_signal_or_a_token_costs_what_an_event_costs(live_db, monkeypatch, kind):
    _postgres_only()
    if kind == "signal":
        execution_id = _waiting("t.wait-signal", {})
        send, key = (lambda: durableflow.signal(execution_id, "go", {"ok": 1})), "go"
    else:
        execution_id = _waiting("t.token", {})
        send, key = (lambda: durableflow.complete_token(f"{execution_id}:approve", {"ok": 1})), "approve"

    satisfied, queries, pipelines = _wake(send, monkeypatch)

    assert (satisfied, len(queries), pipelines) == (1, 2, 1), queries
    assert len(_xmins(execution_id, key)) == 1


def test_the_woken_delivery_replays_the_completed_wait_without_reading_it(live_db):
    key = uid("ev")
    execution_id = _waiting("t.wait-event", {"match": {"k": key}})
    durableflow.send_event("t.event", {"k": key})

    with CaptureQueriesContext(connection) as captured:
        assert operations.deliver(execution_id) == "completed"
    queries = [query["sql"] for query in captured.captured_queries]

    # The claim, the journal read, the outcome: no waiter, event or step record read or written.
    assert len(queries) == 3, queries
    assert not any("durableflow_waiter" in sql or "durableflow_event" in sql for sql in queries)
    assert Execution.objects.get(pk=execution_id).result == {"k": key}


def test_an_invoked_child_that_completes_within_its_parents_delivery_costs_no_wait(live_db):
    parent = durableflow.start("t.invoke", {"n": 4}, queue=QUEUE)
    with CaptureQueriesContext(connection) as captured:
        assert operations.deliver(parent.id) == "completed"
    queries = [query["sql"] for query in captured.captured_queries]

    assert Execution.objects.get(pk=parent.id).result == {"value": 8}
    assert Execution.objects.get(pk=parent.id).deliveries == 1
    # The parent's claim; its start step (the child and the record, one transaction); the child's
    # claim, step and outcome; the child read once; the wait's record; the parent's outcome.
    assert not any("durableflow_waiter" in sql for sql in queries)
    writes = [sql for sql in queries if not sql.startswith(("SELECT", "SAVEPOINT", "RELEASE", "BEGIN", "COMMIT"))]
    assert len(writes) == 8, writes


def _plan_cost(sql: str, params: dict, mode: str) -> float:
    """The estimated cost of ``sql`` prepared, as PostgreSQL plans it in ``mode`` (custom or generic)."""
    names: list[str] = []

    def number(match: re.Match) -> str:
        if match.group(1) not in names:
            names.append(match.group(1))
        return f"${names.index(match.group(1)) + 1}"

    prepared = re.sub(r"%\((\w+)\)s", number, sql)
    arguments = connection.ops.compose_sql(", ".join(["%s"] * len(names)), [params[name] for name in names])
    with connection.cursor() as cursor:
        # Only planned (EXPLAIN without ANALYZE runs nothing); a session setting, reset after.
        cursor.execute(f"PREPARE durableflow_plan_probe AS {prepared}")
        try:
            cursor.execute(f"SET plan_cache_mode = force_{mode}_plan")
            cursor.execute(f"EXPLAIN (FORMAT JSON) EXECUTE durableflow_plan_probe({arguments})")
            plan = cursor.fetchone()[0]
        finally:
            cursor.execute("RESET plan_cache_mode")
            cursor.execute("DEALLOCATE durableflow_plan_probe")
    plan = json.loads(plan) if isinstance(plan, str) else plan
    return plan[0]["Plan"]["Total Cost"]


@pytest.mark.parametrize("kind", ["event", "signal", "token"])
def test_a_wake_up_statement_is_planned_once_not_at_every_call(live_db, monkeypatch, kind):
    """The prepared statement's generic plan is estimated no costlier than a plan made for the
    call's values, so that PostgreSQL keeps it: otherwise it plans the statement again at every
    call (0.7 ms once the tables have grown), which it did while what is the same at every call of
    a verb (whether a waiter names the owner, the statuses, how many candidates) was passed as
    parameters."""
    _postgres_only()
    built: list[tuple[str, dict]] = []
    real = SatisfyStatements.statement

    def kept(self, request):
        sql, params = real(self, request)
        built.append((sql, {**params, "now": 0.0}))
        return sql, params

    monkeypatch.setattr(SatisfyStatements, "statement", kept)
    if kind == "event":
        key = uid("ev")
        _waiting("t.wait-event", {"match": {"k": key}})
        assert durableflow.send_event("t.event", {"k": key}) == 1
    elif kind == "signal":
        execution_id = _waiting("t.wait-signal", {})
        assert durableflow.signal(execution_id, "go", {"ok": 1}) == 1
    else:
        execution_id = _waiting("t.token", {})
        assert durableflow.complete_token(f"{execution_id}:approve", {"ok": 1}) == 1
    monkeypatch.undo()
    [(sql, params)] = built

    custom, generic = _plan_cost(sql, params, "custom"), _plan_cost(sql, params, "generic")
    assert generic <= custom * 1.05, (generic, custom)
