"""Transactional steps on the real database, in autocommit as on a worker: one transaction per
step (its statements counted), another alias refused, savepoints inside the body, a genuine
serialization failure (PostgreSQL) run again.

Deliveries run in this process (``operations.deliver``) on queues no worker consumes.
"""

from __future__ import annotations

import threading

import pytest
from django.db import connection, connections, transaction
from django.db.models import F
from django.test.utils import CaptureQueriesContext

import durableflow
from durableflow import WorkflowValueError, operations
from durableflow.engine.steps.transactions import TransactionSteps
from durableflow.models import Execution, StepRecord
from tests.helpers import uid
from tests.testapp.models import Counter, Marker

STEP_TABLE = '"durableflow_steprecord"'


@pytest.fixture(autouse=True)
def _no_backoff(monkeypatch):
    monkeypatch.setattr(TransactionSteps, "transient_backoff", (0.0, 0.0))


def _deliver(workflow: str, params=None) -> Execution:
    execution = durableflow.start(workflow, params, queue=uid("nobody"))
    operations.deliver(execution.id)
    return Execution.objects.get(pk=execution.id)


# One transaction, the run step's INSERT ------------------------------------------------------


def bump(name: str) -> None:
    Counter.objects.filter(name=name).update(value=F("value") + 1)


@durableflow.workflow("txorm.one-update")
def one_update_wf(ctx, params):
    ctx.step.transaction("bump", bump, params["name"])


@durableflow.workflow("txorm.one-run")
def one_run_wf(ctx, params):
    ctx.step.run("noop", lambda: None)


def _captured(workflow: str, params) -> list[str]:
    execution = durableflow.start(workflow, params, queue=uid("nobody"))
    with CaptureQueriesContext(connection) as captured:
        assert operations.deliver(execution.id) == "completed"
    return [query["sql"] for query in captured.captured_queries]


def test_a_transactional_step_is_one_transaction_holding_the_body_and_the_run_steps_insert(live_db):
    name = uid("shape")
    Counter.objects.create(name=name)

    queries = _captured("txorm.one-update", {"name": name})
    run_queries = _captured("txorm.one-run", {})

    assert Counter.read(name) == 1
    begin = [i for i, sql in enumerate(queries) if sql.startswith("BEGIN")]
    commit = [i for i, sql in enumerate(queries) if sql == "COMMIT"]
    assert len(begin) == len(commit) == 1, queries
    inside = queries[begin[0] + 1 : commit[0]]
    assert [sql.split()[0] for sql in inside] == ["UPDATE", "INSERT"], inside
    assert inside[0].startswith('UPDATE "testapp_counter"')
    # The record is written by the very statement a run step uses, fenced by the lease.
    (run_insert,) = [sql for sql in run_queries if sql.startswith(f"INSERT INTO {STEP_TABLE}")]
    assert _template(inside[1]) == _template(run_insert)
    # claim (a first delivery: no journal to read), BEGIN, body, record, COMMIT, outcome
    assert len(queries) == 6, queries
    assert not connection.in_atomic_block


def _template(sql: str) -> str:
    """The statement without its parameter values (SQLite's captured SQL has them inlined)."""
    return sql.split(" SELECT ")[0]


# Another alias -------------------------------------------------------------------------------


@pytest.fixture
def elsewhere():
    """A second database alias, configured for this test only."""
    configured = connections.configure_settings(
        {"default": dict(connections.settings["default"]), "elsewhere": {"ENGINE": "django.db.backends.sqlite3"}}
    )
    connections.settings["elsewhere"] = {**configured["elsewhere"], "NAME": ":memory:"}
    try:
        yield "elsewhere"
    finally:
        connections["elsewhere"].close()
        del connections["elsewhere"]
        del connections.settings["elsewhere"]


def write_here_and_there(name: str) -> int:
    Marker.objects.create(name=name, pid=0)
    return Marker.objects.using("elsewhere").filter(name=name).count()


@durableflow.workflow("txorm.elsewhere")
def elsewhere_wf(ctx, params):
    try:
        ctx.step.transaction("write", write_here_and_there, params["name"])
    except WorkflowValueError as exc:
        return {"code": exc.code, "message": exc.message}


def test_a_query_through_another_alias_is_refused_naming_it_and_the_writes_roll_back(live_db, elsewhere):
    name = uid("alias")
    execution = _deliver("txorm.elsewhere", {"name": name})

    assert execution.result["code"] == "TRANSACTION_WRONG_ALIAS"
    assert "'elsewhere'" in execution.result["message"]
    assert "'default'" in execution.result["message"]
    assert Marker.count(name) == 0


# Savepoints in the body ----------------------------------------------------------------------


def add_with_a_failed_savepoint(name: str) -> int:
    try:
        with transaction.atomic():
            Marker.objects.create(name=name, pid=1)
            raise ValueError("undo this block only")
    except ValueError:
        pass
    Marker.objects.create(name=name, pid=2)
    return Marker.count(name)


@durableflow.workflow("txorm.savepoint")
def savepoint_wf(ctx, params):
    return ctx.step.transaction("write", add_with_a_failed_savepoint, params["name"])


def test_the_bodys_own_atomic_blocks_nest_as_savepoints(live_db):
    name = uid("savepoint")
    execution = _deliver("txorm.savepoint", {"name": name})

    assert execution.result == 1
    assert list(Marker.objects.filter(name=name).values_list("pid", flat=True)) == [2]


# Starting a workflow from a body -------------------------------------------------------------


def start_a_child(name: str) -> str:
    Marker.hit(name)
    return durableflow.start("t.ping", queue=uid("nobody"), execution_id=f"{name}-child").id


@durableflow.workflow("txorm.start")
def start_wf(ctx, params):
    return ctx.step.transaction("start", start_a_child, params["name"])


def test_an_execution_started_in_a_body_commits_with_the_step(live_db):
    name = uid("start")
    execution = _deliver("txorm.start", {"name": name})

    # durableflow.start sends its message on commit: after the body, so it is not refused.
    assert execution.status == "completed", execution.error
    assert Execution.objects.filter(pk=f"{name}-child").exists()


# A genuine serialization failure -------------------------------------------------------------

tries: dict[str, int] = {}


def _bump_elsewhere(name: str) -> None:
    try:
        Counter.objects.filter(name=name).update(value=F("value") + 10)
    finally:
        connection.close()


def read_then_write_under_repeatable_read(name: str) -> int:
    tries[name] = tries.get(name, 0) + 1
    with connection.cursor() as cursor:
        cursor.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
    value = Counter.objects.get(name=name).value  # the snapshot is taken here
    if tries[name] == 1:  # another transaction changes the row and commits meanwhile
        other = threading.Thread(target=_bump_elsewhere, args=(name,))
        other.start()
        other.join()
    Counter.objects.filter(name=name).update(value=value + 1)  # 40001 on the first try
    return value + 1


@durableflow.workflow("txorm.serialization")
def serialization_wf(ctx, params):
    return ctx.step.transaction("bump", read_then_write_under_repeatable_read, params["name"])


def test_a_real_serialization_failure_runs_the_transaction_again_and_records_once(live_db):
    if connection.vendor != "postgresql":
        pytest.skip(
            "SQLite has no concurrent writers to conflict with (a transaction takes the write lock at BEGIN); "
            "its 'database is locked' is run again too: test_transactions_live.py"
        )
    name = uid("serial")
    Counter.objects.create(name=name)

    execution = _deliver("txorm.serialization", {"name": name})

    assert execution.status == "completed", execution.error
    assert tries[name] == 2
    assert Counter.read(name) == 11  # the other transaction's +10, then this step's +1, once
    (record,) = StepRecord.objects.filter(execution_id=execution.id)
    assert (record.status, record.attempts, record.value) == ("completed", 1, 11)
