"""A database failure under a delivery is never the workflow's: held against both storages.

Each test makes one storage operation fail once (``fail_once``: the error a driver raises for a
terminated connection, a timeout, a busy database) and delivers in-process until the run ends.
The run must complete with nothing caught by its ``except Exception`` (``t.faults`` journals
what it caught), and no delivery may leave it failed. The user's own errors stay the user's:
a step body's database error is recorded and raised into the workflow as before. The same on
real workers: ``test_faults_live.py``.
"""

from __future__ import annotations

import sqlite3

import pytest
from django.db import DataError, IntegrityError, InterfaceError, OperationalError

import durableflow
from durableflow.engine import faults
from durableflow.engine.states import TERMINAL
from durableflow.engine.steps.transactions import TransactionSteps
from durableflow.testing import MemoryTable
from tests.helpers import uid
from tests.testapp.faults import OPS

TERMINATED = "terminating connection due to administrator command"

# What t.tx-count's transactional body changes: a model row (ORM), a MemoryTable (memory).
_table = MemoryTable()
_runs: dict[str, int] = {}


@pytest.fixture(autouse=True)
def _counter(request):
    if "backend" in request.fixturenames:
        _table.clear()
        _runs.clear()
    yield


def _add(tag: str, orm: bool) -> int:
    _runs[tag] = _runs.get(tag, 0) + 1
    if orm:
        from tests.testapp.models import Counter

        return Counter.add(tag)
    _table[tag] = _table.get(tag, 0) + 1
    return _table[tag]


@durableflow.workflow("t.tx-count")
def tx_count(ctx, params):
    count = ctx.step.transaction("add", _add, params["tag"], params["orm"])
    return {"count": count, "runs": _runs.get(params["tag"], 0)}


def fail_once(storage, op: str, error: Exception | None = None, *, times: int = 1) -> list[str]:
    """Make ``storage.op`` raise ``error`` on its next ``times`` calls; the list of calls that failed."""
    original = getattr(storage, op)
    failed: list[str] = []

    def failing(*args, **kwargs):
        if len(failed) < times:
            failed.append(op)
            raise error or OperationalError(TERMINATED)
        return original(*args, **kwargs)

    setattr(storage, op, failing)
    return failed


def deliver_until_done(harness, execution_id: str, *, limit: int = 10) -> list[tuple[str, str]]:
    """Deliver until the run ends: what each delivery returned, and the status it left."""
    seen = []
    for _ in range(limit):
        happened = harness.deliver(execution_id)
        status = harness.get(execution_id).status
        seen.append((happened, status))
        if status in TERMINAL:
            return seen
    raise AssertionError(f"execution {execution_id} did not end: {seen}")


def start_faults(harness) -> str:
    execution_id = harness.start("t.faults", {"store": uid("store"), "effect_id": uid("effect")})
    harness.signal(execution_id, "go", "now")  # kept until its wait registers
    return execution_id


EXPECTED = {"caught": [], "one": 1, "version": 1, "go": "now", "two": 2}


@pytest.mark.parametrize("op", sorted(OPS))
def test_a_database_failure_ends_the_delivery_and_workflow_code_never_sees_it(backend, op):
    execution_id = start_faults(backend)
    failed = fail_once(backend.storage, op)

    seen = deliver_until_done(backend, execution_id)

    assert failed == [op], f"{OPS[op]} never ran"
    done = backend.get(execution_id)
    assert done.status == "completed", done.error
    assert {k: v for k, v in done.result.items() if k != "receipt"} == EXPECTED
    assert done.result["receipt"] == {"receipt": done.result["receipt"]["receipt"]}
    assert done.error is None
    assert [status for _, status in seen if status == "failed"] == []
    if op == "claim":  # failed before it claimed anything: claimed again at once, in the same delivery
        assert seen == [("completed", "completed")]
    else:
        assert seen[0] == (faults.FAULT, "running") and seen[-1][1] == "completed"
        assert len(seen) == 2  # given back: the next delivery claimed it at once, no clock moved


def test_the_lease_is_given_back_after_a_fault(backend):
    execution_id = start_faults(backend)
    fail_once(backend.storage, "record_outcome")

    assert backend.deliver(execution_id) == faults.FAULT

    execution = backend.get(execution_id)
    assert (execution.status, execution.lease_token, execution.lease_expires_at) == ("running", None, None)


def test_workflow_code_that_catches_base_exception_still_ends_the_delivery(backend):
    execution_id = backend.start("t.catch-everything")
    failed = fail_once(backend.storage, "insert_step")

    assert backend.deliver(execution_id) == faults.FAULT
    assert backend.get(execution_id).status == "running"
    assert failed == ["insert_step"]
    assert backend.deliver(execution_id) == "completed"
    assert backend.get(execution_id).result == {"caught": None, "step": 1}


@pytest.mark.parametrize(
    "error",
    [OperationalError(TERMINATED), InterfaceError("connection already closed"), sqlite3.OperationalError("locked")],
    ids=["operational", "interface", "driver"],
)
def test_every_kind_of_database_failure_is_a_fault(backend, error):
    execution_id = start_faults(backend)
    fail_once(backend.storage, "insert_step", error)

    assert deliver_until_done(backend, execution_id)[0][0] == faults.FAULT
    assert backend.get(execution_id).result["caught"] == []


def test_a_fault_that_lasts_leaves_the_run_as_it_was(backend):
    execution_id = start_faults(backend)
    fail_once(backend.storage, "insert_step", times=3)

    assert [backend.deliver(execution_id) for _ in range(3)] == [faults.FAULT] * 3
    assert backend.get(execution_id).status == "running"
    assert backend.records(execution_id) == []
    assert deliver_until_done(backend, execution_id) == [("completed", "completed")]


# The user's own errors -------------------------------------------------------------------------


def test_a_step_body_s_own_database_error_is_recorded_as_the_step_s_failure(backend):
    execution_id = backend.start("t.user-db-error", {"catch": True})

    assert deliver_until_done(backend, execution_id) == [("completed", "completed")]
    assert backend.get(execution_id).result == {
        "caught": "OperationalError: canceling statement due to statement timeout"
    }
    [record] = backend.records(execution_id)
    assert (record.key, record.status, record.error["type"]) == ("query", "failed", "django.db.utils.OperationalError")


def test_a_step_body_s_own_database_error_uncaught_fails_the_run(backend):
    execution_id = backend.start("t.user-db-error")

    assert deliver_until_done(backend, execution_id) == [("failed", "failed")]
    error = backend.get(execution_id).error
    assert (error["type"], error["step"]) == ("django.db.utils.OperationalError", "query")


def test_a_transactional_body_s_own_database_error_is_the_step_s(backend):
    execution_id = backend.start("t.tx-db-error", {"tag": uid("tx")})

    assert deliver_until_done(backend, execution_id) == [("completed", "completed")]
    assert backend.get(execution_id).result == {"caught": "OperationalError: canceling statement due to user request"}


def test_a_transactional_step_s_record_write_failing_ends_the_delivery_and_rolls_the_body_back(backend):
    tag = uid("tx")
    execution_id = backend.start("t.tx-count", {"tag": tag, "orm": backend.name == "orm"})
    failed = fail_once(backend.storage, "insert_step")

    seen = deliver_until_done(backend, execution_id)

    assert failed == ["insert_step"]
    assert seen == [(faults.FAULT, "running"), ("completed", "completed")]
    assert backend.get(execution_id).result == {"count": 1, "runs": 2}  # the first run's write rolled back


def test_a_transient_failure_of_a_transactional_step_s_record_is_retried_by_the_step(backend, monkeypatch):
    monkeypatch.setattr(TransactionSteps, "transient_backoff", (0.0, 0.0))
    tag = uid("tx")
    execution_id = backend.start("t.tx-count", {"tag": tag, "orm": backend.name == "orm"})
    failed = fail_once(backend.storage, "insert_step", OperationalError("database is locked"))

    assert deliver_until_done(backend, execution_id) == [("completed", "completed")]
    assert failed == ["insert_step"]
    assert backend.get(execution_id).result == {"count": 1, "runs": 2}


# Item tasks ---------------------------------------------------------------------------------------


def test_an_item_task_the_database_failed_under_gives_its_attempt_back(backend):
    execution_id = backend.start("t.faults-map", {"items": [1, 2]})
    assert backend.deliver(execution_id) == "suspended"
    failed = fail_once(backend.storage, "record_item")

    assert backend.run_items(execution_id)[0] == faults.FAULT
    assert failed == ["record_item"]
    assert backend.run_items(execution_id) == ["completed"]  # the one given back, claimable at once
    assert backend.run(execution_id).result == [2, 4]


# What is a fault ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "error, fault",
    [
        (OperationalError(TERMINATED), True),
        (InterfaceError("connection already closed"), True),
        (sqlite3.OperationalError("database is locked"), True),
        (sqlite3.InterfaceError("bad"), True),
        (IntegrityError("duplicate key"), False),
        (DataError("value too long"), False),
        (sqlite3.IntegrityError("UNIQUE constraint failed"), False),
        (ValueError("not a database error"), False),
        (ConnectionError("a socket"), False),
    ],
)
def test_is_fault_is_every_database_error_but_a_refusal_of_the_values(error, fault):
    assert faults.is_fault(error) is fault


def test_psycopg_errors_are_faults_by_their_class():
    psycopg = pytest.importorskip("psycopg")
    from psycopg import errors

    for error in (
        errors.AdminShutdown,
        errors.QueryCanceled,
        errors.SerializationFailure,
        errors.ReadOnlySqlTransaction,
    ):
        assert faults.is_fault(error("x")), error
    assert not faults.is_fault(errors.UniqueViolation("x"))
    assert not faults.is_fault(psycopg.DataError("x"))


def test_resend_delays_double_up_to_five_seconds_with_jitter():
    for resends, ceiling in [(0, 0.25), (1, 0.5), (3, 2.0), (5, 5.0), (30, 5.0)]:
        delays = [faults.resend_delay(resends) for _ in range(200)]
        assert ceiling / 2 <= min(delays) and max(delays) <= ceiling
