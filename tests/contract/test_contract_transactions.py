"""Transactional steps, held against both storages: in memory (with a ``MemoryTable`` double)
and the ORM (a real model row on SQLite / PostgreSQL).

Deliveries run in-process under the test's control. On the ORM the test's own transaction
wraps everything, so each step's transaction is a savepoint here; the real-worker tests
(``test_transactions_live.py``) show the same on committed transactions.
"""

from __future__ import annotations

import pytest
from pydantic import BaseModel

import durableflow
from durableflow import Retry, WorkflowValueError, dispatch
from durableflow.engine.records import StepRecordData
from durableflow.engine.steps.transactions import TransactionSteps
from durableflow.testing import MemoryTable, WorkflowTester, current_transaction
from tests.harness import LEASE_SECONDS


class ModelCounter:
    """The counter as a row of a project model (the ORM backend)."""

    def add(self, name: str) -> int:
        from tests.testapp.models import Counter

        return Counter.add(name)

    def read(self, name: str) -> int:
        from tests.testapp.models import Counter

        return Counter.read(name)


class TableCounter:
    """The counter in a ``MemoryTable`` test double (the in-memory backend)."""

    def __init__(self) -> None:
        self.table = MemoryTable()

    def add(self, name: str) -> int:
        self.table[name] = self.table.get(name, 0) + 1
        return self.table[name]

    def read(self, name: str) -> int:
        return self.table.get(name, 0)


counter: ModelCounter | TableCounter = TableCounter()
calls: dict[str, int] = {}
harness = None


@pytest.fixture(autouse=True)
def _counter(request, monkeypatch):
    """The counter of the test's storage, for the bodies to change; the harness, for them to reach."""
    global counter, harness
    if "backend" not in request.fixturenames:
        return
    # Transient retries without waiting.
    monkeypatch.setattr(TransactionSteps, "transient_backoff", (0.0, 0.0))
    calls.clear()
    harness = request.getfixturevalue("backend")
    counter = TableCounter() if harness.name == "memory" else ModelCounter()


def called(name: str) -> int:
    calls[name] = calls.get(name, 0) + 1
    return calls[name]


# Committing and replaying -------------------------------------------------------------------


def add_and_count(name: str) -> int:
    called("body")
    return counter.add(name)


@durableflow.workflow("tx.commit")
def commit_wf(ctx, params):
    value = ctx.step.transaction("add", add_and_count, "c")
    ctx.step.sleep("pause", 5)
    return {"value": value}


def test_the_body_and_the_record_commit_together_and_replay_does_not_run_the_body(backend):
    execution_id = backend.start("tx.commit")

    assert backend.deliver(execution_id) == "suspended"
    assert counter.read("c") == 1
    record = backend.records(execution_id)[0]
    assert (record.kind, record.status, record.attempts, record.value) == ("transaction", "completed", 1, 1)

    backend.advance(5.5)
    backend.deliver(execution_id)
    assert backend.get(execution_id).result == {"value": 1}
    assert calls == {"body": 1}
    assert counter.read("c") == 1


# Failing bodies ------------------------------------------------------------------------------


def add_then_fail(name: str) -> int:
    seen = counter.read(name)
    counter.add(name)
    called(f"saw-{seen}")
    if calls.get("attempt-ok") is None and called("attempt") < 2:
        raise ValueError("the body failed after writing")
    return seen


@durableflow.workflow("tx.fail")
def fail_wf(ctx, params):
    retry = Retry(interval=1) if params.get("retry") else None
    if not params.get("catch", True):
        return ctx.step.transaction("add", add_then_fail, "f", retry=retry)
    try:
        return ctx.step.transaction("add", add_then_fail, "f", retry=retry)
    except ValueError as exc:
        return {"error": str(exc)}


def test_a_body_that_raises_after_writing_leaves_nothing_behind(backend):
    execution_id = backend.start("tx.fail", {})
    backend.run(execution_id)

    assert backend.get(execution_id).result == {"error": "the body failed after writing"}
    assert counter.read("f") == 0
    (record,) = backend.records(execution_id)
    assert (record.kind, record.status, record.error["type"]) == ("transaction", "failed", "builtins.ValueError")


def test_with_retry_the_next_attempt_sees_a_clean_table(backend):
    execution_id = backend.start("tx.fail", {"retry": True})

    assert backend.deliver(execution_id) == "suspended"  # the first attempt failed; a durable retry waits
    assert counter.read("f") == 0
    backend.run(execution_id)

    assert backend.get(execution_id).result == 0  # the second attempt saw the row untouched
    assert calls == {"saw-0": 2, "attempt": 2}
    assert counter.read("f") == 1
    (record,) = backend.records(execution_id)
    assert (record.status, record.attempts) == ("completed", 2)


def test_retry_of_a_failed_transactional_step_runs_it_again_and_commits_once(backend):
    execution_id = backend.start("tx.fail", {"catch": False})
    backend.run(execution_id)
    assert backend.get(execution_id).status == "failed"
    assert counter.read("f") == 0

    calls["attempt-ok"] = 1
    backend.retry(execution_id)
    backend.run(execution_id)

    assert backend.get(execution_id).result == 0
    assert counter.read("f") == 1


# Fenced out: the record cannot be written ----------------------------------------------------


def add_then_lose_the_lease(name: str, execution_id: str) -> int:
    value = counter.add(name)
    if called("body") == 1:  # another delivery takes the execution over while the body runs
        harness.storage.update_execution(execution_id, {"lease_token": "another-delivery"})
    return value


@durableflow.workflow("tx.fenced")
def fenced_wf(ctx, params):
    return ctx.step.transaction("add", add_then_lose_the_lease, "l", ctx.execution_id)


def test_a_fenced_out_record_rolls_the_body_back(backend):
    execution_id = backend.start("tx.fenced")

    assert backend.deliver(execution_id) == "lease-lost"
    assert counter.read("l") == 0
    assert backend.records(execution_id) == []

    backend.advance(LEASE_SECONDS + 1)  # the lease (still ours: the takeover rolled back too) lapses
    backend.run(execution_id)
    assert backend.get(execution_id).result == 1
    assert counter.read("l") == 1


def add_then_get_recorded_first(name: str, execution_id: str) -> int:
    value = counter.add(name)
    if called("body") == 1:  # another delivery records the step, with the same value
        harness.inject(execution_id, StepRecordData(key="add", kind="transaction", status="completed", value=value))
    return value


@durableflow.workflow("tx.recorded-first")
def recorded_first_wf(ctx, params):
    return ctx.step.transaction("add", add_then_get_recorded_first, "r", ctx.execution_id)


def test_a_step_recorded_first_elsewhere_rolls_the_body_back_even_with_the_same_value(backend):
    execution_id = backend.start("tx.recorded-first")

    assert backend.deliver(execution_id) == "requeued"
    assert counter.read("r") == 0

    backend.run(execution_id)
    assert backend.get(execution_id).result == 1
    assert counter.read("r") == 1
    assert calls == {"body": 2}


# Serialization failures and deadlocks --------------------------------------------------------


class SerializationFailure(Exception):
    """What psycopg raises for SQLSTATE 40001 (duck-typed: the storages read ``sqlstate``)."""

    sqlstate = "40001"


def add_then_conflict(name: str, times: int) -> int:
    value = counter.add(name)
    if called("body") <= times:
        raise SerializationFailure("could not serialize access due to concurrent update")
    return value


@durableflow.workflow("tx.conflict")
def conflict_wf(ctx, params):
    return ctx.step.transaction("add", add_then_conflict, "s", params["times"])


def test_a_serialization_failure_runs_the_transaction_again_and_records_once(backend):
    execution_id = backend.start("tx.conflict", {"times": 2})
    assert backend.deliver(execution_id) == "completed"

    assert calls == {"body": 3}
    assert counter.read("s") == 1
    (record,) = backend.records(execution_id)
    assert (record.status, record.attempts, record.value) == ("completed", 1, 1)


def test_a_transaction_that_keeps_conflicting_becomes_a_durable_retry(backend, monkeypatch):
    monkeypatch.setattr(TransactionSteps, "transient_tries", 2)
    execution_id = backend.start("tx.conflict", {"times": 1000})

    assert backend.deliver(execution_id) == "suspended"
    (record,) = backend.records(execution_id)
    assert (record.status, record.attempts, record.error["code"]) == ("waiting", 1, "TRANSACTION_CONFLICT")
    backend.run(execution_id)

    execution = backend.get(execution_id)
    assert execution.status == "failed"
    assert execution.error["code"] == "TRANSACTION_CONFLICT"
    assert calls == {"body": 6}  # Retry()'s three attempts of two tries each
    assert counter.read("s") == 0


# Refused inside a body -----------------------------------------------------------------------


def run_nested(ctx):
    counter.add("n")
    return ctx.step.run("inner", lambda: 1)


def send_a_task(swallow: bool):
    counter.add("n")
    try:
        dispatch.send(dispatch.DELIVER, ("nothing",), "nowhere")
    except BaseException:  # a body that swallows everything is still refused
        if not swallow:
            raise
    return 1


def publish_with_celery():
    from celery import current_app

    counter.add("n")
    current_app.send_task("tests.never-sent", queue="nowhere")
    return 1


async def coroutine_body():
    return 1


def returns_a_coroutine():
    counter.add("n")
    return coroutine_body()


BODIES = {
    "nested": lambda ctx: (run_nested, ctx),
    "send": lambda ctx: (send_a_task, False),
    "send-swallowed": lambda ctx: (send_a_task, True),
    "celery": lambda ctx: (publish_with_celery,),
    "coroutine-result": lambda ctx: (returns_a_coroutine,),
}


@durableflow.workflow("tx.refused")
def refused_wf(ctx, params):
    fn, *args = BODIES[params["body"]](ctx)
    try:
        ctx.step.transaction("body", fn, *args, retry=Retry(max_attempts=3))
    except WorkflowValueError as exc:
        return {"code": exc.code, "message": exc.message}
    return {"code": None}


@pytest.mark.parametrize(
    "body, code",
    [
        ("nested", "NESTED_STEP"),
        ("send", "TRANSACTION_FORBIDDEN_CALL"),
        ("send-swallowed", "TRANSACTION_FORBIDDEN_CALL"),
        ("celery", "TRANSACTION_FORBIDDEN_CALL"),
        ("coroutine-result", "TRANSACTION_ASYNC_BODY"),
    ],
)
def test_what_a_transaction_cannot_include_is_refused_rolled_back_and_not_retried(backend, body, code):
    execution_id = backend.start("tx.refused", {"body": body})
    backend.run(execution_id)

    result = backend.get(execution_id).result
    assert result["code"] == code, result
    assert counter.read("n") == 0
    (record,) = backend.records(execution_id)
    assert (record.status, record.attempts, record.error["code"]) == ("failed", 1, code)
    if code == "TRANSACTION_FORBIDDEN_CALL":
        assert "transactional step 'body'" in result["message"] and "on_commit" in result["message"]


@durableflow.workflow("tx.async")
def async_wf(ctx, params):
    try:
        ctx.step.transaction("body", coroutine_body)
    except WorkflowValueError as exc:
        return {"code": exc.code, "message": exc.message}


def test_a_coroutine_function_body_is_refused_before_anything_runs(backend):
    execution_id = backend.start("tx.async")
    backend.run(execution_id)

    result = backend.get(execution_id).result
    assert result["code"] == "TRANSACTION_ASYNC_BODY"
    assert "coroutine_body" in result["message"]
    assert backend.records(execution_id) == []


# Values and schemas --------------------------------------------------------------------------


class Total(BaseModel):
    total: int


def add_and_describe(name: str, valid: bool):
    value = counter.add(name)
    return {"total": value if valid else "many"}


@durableflow.workflow("tx.schema")
def schema_wf(ctx, params):
    try:
        total = ctx.step.transaction("add", add_and_describe, "v", params["valid"], schema=Total)
    except WorkflowValueError as exc:
        return {"code": exc.code}
    return {"is_model": isinstance(total, Total), "total": total.total}


def test_a_schema_validates_the_value_and_a_rejected_value_rolls_the_writes_back(backend):
    valid = backend.start("tx.schema", {"valid": True})
    backend.run(valid)
    assert backend.get(valid).result == {"is_model": True, "total": 1}
    assert backend.records(valid)[0].meta == {"schema": "accepted"}

    invalid = backend.start("tx.schema", {"valid": False})
    backend.run(invalid)
    assert backend.get(invalid).result == {"code": "STEP_SCHEMA_INVALID"}
    assert counter.read("v") == 1  # only the valid run's write
    assert backend.records(invalid)[0].status == "failed"


def add_and_return_a_set(name: str):
    counter.add(name)
    return {1, 2}


@durableflow.workflow("tx.bad-value")
def bad_value_wf(ctx, params):
    try:
        ctx.step.transaction("add", add_and_return_a_set, "b", retry=Retry(max_attempts=3))
    except WorkflowValueError as exc:
        return {"code": exc.code}


def test_a_value_that_cannot_be_journaled_rolls_the_writes_back(backend):
    execution_id = backend.start("tx.bad-value")
    backend.run(execution_id)

    assert backend.get(execution_id).result == {"code": "INVALID_STEP_VALUE"}
    assert counter.read("b") == 0
    assert calls == {}


@durableflow.workflow("tx.no-key")
def no_key_wf(ctx, params):
    try:
        ctx.step.transaction(add_and_count, "k")
    except TypeError as exc:
        return {"error": str(exc)}


def test_a_transactional_step_needs_an_explicit_key(backend):
    execution_id = backend.start("tx.no-key")
    backend.run(execution_id)
    assert "needs a step key first" in backend.get(execution_id).result["error"]


# The in-memory tester ------------------------------------------------------------------------


undone: list[str] = []


def register_an_undo_and_fail():
    current_transaction().on_rollback(lambda: undone.append("undo"))
    raise ValueError("no")


@durableflow.workflow("tx.tester-hook")
def hook_wf(ctx, params):
    try:
        ctx.step.transaction("body", register_an_undo_and_fail)
    except ValueError:
        return "caught"


def test_the_tester_rolls_back_a_double_registered_with_current_transaction():
    undone.clear()
    tester = WorkflowTester()
    execution = tester.start("tx.tester-hook")
    assert tester.run_until_finished(execution.id) == "caught"
    assert undone == ["undo"]
    assert current_transaction() is None
