"""The engine's contract, held against both journals: in memory and the ORM (SQLite or PostgreSQL).

Deliveries run in-process under the test's control, so each rule is shown step by step.
"""

from __future__ import annotations

import random
from datetime import timedelta

import pytest
from pydantic import BaseModel

import durableflow
from durableflow import Retry, RetryableError, WorkflowValueError
from durableflow.engine.records import LeaseLost, StepRecordData
from durableflow.registry import WorkflowDefinition, registry
from tests.harness import LEASE_SECONDS

calls: dict[str, int] = {}


def counted(name: str, value=None):
    calls[name] = calls.get(name, 0) + 1
    return value if value is not None else calls[name]


@pytest.fixture(autouse=True)
def _reset_calls():
    calls.clear()


# Replay -------------------------------------------------------------------------------------


@durableflow.workflow("contract.replay")
def replay_wf(ctx, params):
    first = ctx.step.run("first", counted, "first", {"n": 1})
    ctx.step.sleep("pause", 5)
    second = ctx.step.run("second", counted, "second")
    return {"first": first, "second": second}


def test_completed_steps_replay_their_recorded_value_without_running(backend):
    execution_id = backend.start("contract.replay", {})

    assert backend.deliver(execution_id) == "suspended"
    assert backend.get(execution_id).status == "waiting"
    backend.advance(5.5)  # a little past due: SQLite's clock has millisecond steps
    backend.deliver(execution_id)

    execution = backend.get(execution_id)
    assert execution.status == "completed"
    assert execution.result == {"first": {"n": 1}, "second": 1}
    assert calls == {"first": 1, "second": 1}
    assert [(r.key, r.kind, r.status) for r in backend.records(execution_id)] == [
        ("first", "run", "completed"),
        ("pause", "sleep", "completed"),
        ("second", "run", "completed"),
    ]


shared = {"items": [1, 2.0]}


@durableflow.workflow("contract.decoded")
def decoded_wf(ctx, params):
    value = ctx.step.run("value", lambda: shared)
    return {"is_copy": value is not shared, "equal": value == shared, "float": isinstance(value["items"][1], float)}


def test_the_first_run_returns_the_decoded_journaled_value(backend):
    execution_id = backend.start("contract.decoded")
    backend.deliver(execution_id)
    assert backend.get(execution_id).result == {"is_copy": True, "equal": True, "float": True}


@durableflow.workflow("contract.invalid-value")
def invalid_value_wf(ctx, params):
    try:
        ctx.step.run("tuple", lambda: {"pair": (1, 2)}, retry=Retry(max_attempts=5))
    except WorkflowValueError as exc:
        return {"code": exc.code, "message": exc.message}


def test_a_non_durable_step_value_raises_invalid_step_value_and_is_not_retried(backend):
    execution_id = backend.start("contract.invalid-value")
    backend.deliver(execution_id)

    execution = backend.get(execution_id)
    assert execution.result["code"] == "INVALID_STEP_VALUE"
    assert "/pair" in execution.result["message"]
    (record,) = backend.records(execution_id)
    assert (record.status, record.attempts, record.error["code"]) == ("failed", 1, "INVALID_STEP_VALUE")


@durableflow.workflow("contract.duplicate-key")
def duplicate_key_wf(ctx, params):
    ctx.step.run("same", lambda: 1)
    ctx.step.run("same", lambda: 2)


@durableflow.workflow("contract.bad-keys")
def bad_keys_wf(ctx, params):
    codes = []
    for key in ("", "$reserved", "k" * 256, "nul\x00", "lone\ud800"):
        try:
            ctx.step.run(key, lambda: 1)
        except WorkflowValueError as exc:
            codes.append(exc.code)
    return codes


def test_invalid_step_keys_are_refused(backend):
    execution_id = backend.start("contract.bad-keys")
    backend.deliver(execution_id)
    assert backend.get(execution_id).result == ["INVALID_STEP_KEY"] * 5
    assert backend.records(execution_id) == []


def test_reaching_a_step_key_twice_raises_duplicate_step_key(backend):
    execution_id = backend.start("contract.duplicate-key")
    backend.deliver(execution_id)

    execution = backend.get(execution_id)
    assert execution.status == "failed"
    assert execution.error["code"] == "DUPLICATE_STEP_KEY"
    assert "'same'" in execution.error["message"]


@durableflow.workflow("contract.keyless")
def keyless_wf(ctx, params):
    values = [ctx.step.run(lambda i=i: i * 10) for i in range(3)]
    ctx.step.sleep(0)
    return values


def test_keyless_steps_are_keyed_by_call_site_and_occurrence(backend):
    execution_id = backend.start("contract.keyless")
    backend.deliver(execution_id)

    assert backend.get(execution_id).result == [0, 10, 20]
    keys = [record.key for record in backend.records(execution_id)]
    assert keys[:3] == [f"{__name__}:{keys[0].split(':')[1].split('#')[0]}#{n}" for n in (1, 2, 3)]
    assert keys[3].startswith(f"{__name__}:") and keys[3].endswith("#1")


# Non-determinism -----------------------------------------------------------------------------


@durableflow.workflow("contract.changing")
def changing_wf(ctx, params):
    ctx.step.run("reserve", counted, "reserve")
    ctx.step.sleep("wait", 10)
    return ctx.step.run("ship", lambda: "shipped")


def _changed(ctx, params):
    ctx.step.sleep("reserve", 1)  # the key now names another kind of step
    return "changed"


def test_a_changed_step_kind_stalls_the_execution_and_loses_nothing(backend):
    execution_id = backend.start("contract.changing")
    backend.deliver(execution_id)
    before = backend.records(execution_id)

    with registry.override(WorkflowDefinition("contract.changing", _changed)):
        backend.advance(10.5)
        assert backend.deliver(execution_id) == "stalled"

    execution = backend.get(execution_id)
    assert execution.status == "waiting"
    assert execution.error["code"] == "NON_DETERMINISM"
    assert "'reserve'" in execution.error["message"] and "'run'" in execution.error["message"]
    assert execution.waiting_for["kind"] == "stalled"
    assert backend.records(execution_id) == before

    # The right code is back: a retry resumes where the run stopped.
    backend.retry(execution_id)
    assert backend.run(execution_id).result == "shipped"
    assert calls == {"reserve": 1}


def test_a_changed_workflow_version_stalls_the_execution(backend):
    execution_id = backend.start("contract.changing")
    backend.deliver(execution_id)

    with registry.override(WorkflowDefinition("contract.changing", changing_wf, version="2")):
        backend.advance(10.5)
        backend.deliver(execution_id)

    execution = backend.get(execution_id)
    assert (execution.status, execution.error["code"]) == ("waiting", "UNKNOWN_VERSION")
    assert "version '1'" in execution.error["message"] and "registered: '2'" in execution.error["message"]
    # Stalled executions back off on their own until a deploy fixes them.
    assert execution.wake_at is not None
    assert backend.run(execution_id).result == "shipped"


@durableflow.workflow("contract.swallow")
def swallow_wf(ctx, params):
    try:
        ctx.step.sleep("a", 1)  # recorded as a run step below: non-determinism
    except Exception:  # noqa: BLE001 - whatever the workflow sees, the test swallows
        pass
    return "swallowed"


def test_workflow_code_cannot_swallow_non_determinism(backend):
    execution_id = backend.start("contract.swallow")
    journal = backend.journal(execution_id)
    journal.claim()
    journal.write_step(StepRecordData(key="a", kind="run", status="completed", attempts=1, value=1), new=True)
    backend.advance(LEASE_SECONDS + 1)

    backend.deliver(execution_id)

    assert backend.get(execution_id).error["code"] == "NON_DETERMINISM"
    assert backend.get(execution_id).status == "waiting"


@durableflow.workflow("contract.swallow-suspend")
def swallow_suspend_wf(ctx, params):
    try:
        ctx.step.sleep("nap", 30)
    except BaseException:  # noqa: BLE001 - exactly what the engine must survive
        pass
    return "too early"


def test_workflow_code_cannot_swallow_a_suspension(backend):
    execution_id = backend.start("contract.swallow-suspend")
    backend.deliver(execution_id)
    assert backend.get(execution_id).status == "waiting"
    backend.advance(30.5)
    backend.deliver(execution_id)
    assert backend.get(execution_id).result == "too early"


# Retries ------------------------------------------------------------------------------------------


def _fails_until(name: str, successes_after: int, exc_type=ValueError):
    n = counted(name)
    if n <= successes_after:
        raise exc_type(f"attempt {n} failed")
    return n


@durableflow.workflow("contract.retry-policy")
def retry_policy_wf(ctx, params):
    try:
        return ctx.step.run(
            "flaky",
            _fails_until,
            "flaky",
            params["failures"],
            retry=Retry(max_attempts=3, interval=2, backoff=3),
        )
    except ValueError as exc:
        return {"gave_up": str(exc)}


def test_a_retry_policy_retries_plain_exceptions_with_durable_backoff(backend):
    execution_id = backend.start("contract.retry-policy", {"failures": 2})

    backend.deliver(execution_id)
    first_wait = backend.get(execution_id)
    assert (first_wait.status, first_wait.waiting_for["kind"], first_wait.waiting_for["attempt"]) == (
        "waiting",
        "retry",
        1,
    )
    first_wake = first_wait.wake_at
    backend.advance(1.9)
    assert backend.deliver(execution_id) == "skipped"  # not due yet
    backend.advance(0.2)
    backend.deliver(execution_id)
    second_wait = backend.get(execution_id)
    assert second_wait.waiting_for["attempt"] == 2
    assert timedelta(seconds=5.9) < second_wait.wake_at - first_wake < timedelta(seconds=6.5)

    execution = backend.run(execution_id)
    assert execution.result == 3
    (record,) = backend.records(execution_id)
    assert (record.status, record.attempts) == ("completed", 3)


def test_exhausted_retries_raise_the_original_exception_type_into_the_workflow(backend):
    execution_id = backend.start("contract.retry-policy", {"failures": 5})
    execution = backend.run(execution_id)
    assert execution.result == {"gave_up": "attempt 3 failed"}
    (record,) = backend.records(execution_id)
    assert (record.status, record.attempts, record.error["type"]) == ("failed", 3, "builtins.ValueError")


@durableflow.workflow("contract.retryable")
def retryable_wf(ctx, params):
    return ctx.step.run("flaky", _fails_until, "flaky", 2, RetryableError)


def test_retryable_error_retries_without_a_policy(backend):
    execution_id = backend.start("contract.retryable")
    assert backend.run(execution_id).result == 3
    assert backend.records(execution_id)[0].attempts == 3


@durableflow.workflow("contract.no-retry")
def no_retry_wf(ctx, params):
    value = ctx.step.run("before", counted, "before")
    return ctx.step.run("fragile", _fails_until, "fragile", params["failures"]) + value


def test_an_uncaught_step_error_fails_the_run_and_retry_resumes_from_that_step(backend):
    execution_id = backend.start("contract.no-retry", {"failures": 1})
    backend.deliver(execution_id)

    failed = backend.get(execution_id)
    assert failed.status == "failed"
    assert failed.error["step"] == "fragile"
    assert failed.error["message"] == "attempt 1 failed"
    assert "Traceback" in failed.error["traceback"]

    backend.retry(execution_id)
    assert backend.run(execution_id).result == 2 + 1
    assert calls == {"before": 1, "fragile": 2}
    record = backend.records(execution_id)[1]
    assert (record.key, record.status, record.attempts) == ("fragile", "completed", 1)


def test_only_failed_runs_can_be_retried(backend):
    execution_id = backend.start("contract.replay")
    with pytest.raises(durableflow.InvalidTransition):
        backend.retry(execution_id)


# Schemas, timeouts, polls ------------------------------------------------------------------------------


class Order(BaseModel):
    id: int
    total: float


@durableflow.workflow("contract.schema")
def schema_wf(ctx, params):
    order = ctx.step.run("order", lambda: params["order"], schema=Order)
    ctx.step.sleep("pause", 1)
    again = ctx.step.run("again", lambda: 0)
    return {"type": type(order).__name__, "total": order.total, "again": again}


def test_a_step_schema_parses_on_the_first_run_and_on_replay(backend):
    execution_id = backend.start("contract.schema", {"order": {"id": 1, "total": 9}})
    assert backend.run(execution_id).result == {"type": "Order", "total": 9.0, "again": 0}
    assert backend.records(execution_id)[0].meta == {"schema": "accepted"}


def test_a_step_schema_rejection_is_journaled_and_raised(backend):
    execution_id = backend.start("contract.schema", {"order": {"id": "x"}})
    execution = backend.run(execution_id)
    assert (execution.status, execution.error["code"]) == ("failed", "STEP_SCHEMA_INVALID")
    assert "total" in execution.error["message"]
    record = backend.records(execution_id)[0]
    assert (record.status, record.value, record.meta) == ("completed", {"id": "x"}, {"schema": "rejected"})


@durableflow.workflow("contract.timeout")
def timeout_wf(ctx, params):
    import time

    try:
        ctx.step.run("slow", time.sleep, 5, timeout=0.2)
    except durableflow.StepTimeout as exc:
        return exc.code


def test_a_step_timeout_bounds_one_attempt(backend):
    execution_id = backend.start("contract.timeout")
    backend.deliver(execution_id)
    assert backend.get(execution_id).result == "STEP_TIMEOUT"


@durableflow.workflow("contract.poll")
def poll_wf(ctx, params):
    try:
        return ctx.step.poll(
            "ready", lambda: counted("poll") >= params["ready_at"] and "ready", interval=3, max_attempts=3
        )
    except durableflow.WaitTimeout as exc:
        return exc.code


def test_poll_calls_until_truthy_with_each_attempt_journaled(backend):
    execution_id = backend.start("contract.poll", {"ready_at": 3})
    backend.deliver(execution_id)
    assert backend.get(execution_id).waiting_for["kind"] == "poll"
    assert backend.run(execution_id).result == "ready"
    assert backend.records(execution_id)[0].attempts == 3


def test_poll_gives_up_with_wait_timeout(backend):
    execution_id = backend.start("contract.poll", {"ready_at": 99})
    assert backend.run(execution_id).result == "WAIT_TIMEOUT"
    assert calls == {"poll": 3}


# Determinism helpers ---------------------------------------------------------------------------------


@durableflow.workflow("contract.helpers")
def helpers_wf(ctx, params):
    values = {"now": ctx.now().isoformat(), "random": ctx.random(), "uuid": str(ctx.uuid())}
    ctx.step.sleep("pause", 60)
    return {
        "before": values,
        "after": {"now": ctx.now().isoformat(), "random": ctx.random(), "uuid": str(ctx.uuid())},
        "replayed": {"now": values["now"]},
    }


def test_now_random_and_uuid_are_the_same_on_every_replay(backend):
    execution_id = backend.start("contract.helpers", execution_id="fixed-seed-execution")
    backend.deliver(execution_id)
    first_now = backend.records(execution_id)[0].value
    result = backend.run(execution_id).result

    assert result["before"]["now"] == first_now  # replayed from the journal after the sleep
    assert result["after"]["now"] > first_now
    assert result["before"]["random"] != result["after"]["random"]
    # The generator is seeded by the execution id alone, whatever the backend.
    assert result["before"]["random"] == random.Random("fixed-seed-execution").random()


# Leases and conflicts -----------------------------------------------------------------------------------


class Takeover:
    backend = None
    execution_id = None


def _taken_over_midway():
    """The first time: let the lease lapse and have another delivery run the whole workflow."""
    if counted("takeover") == 1:
        Takeover.backend.advance(LEASE_SECONDS + 1)
        assert Takeover.backend.deliver(Takeover.execution_id) == "completed"
    return calls["takeover"]


@durableflow.workflow("contract.takeover")
def takeover_wf(ctx, params):
    value = ctx.step.run("contested", _taken_over_midway)
    return {"value": value, "after": ctx.step.run("after", counted, "after")}


def test_a_delivery_that_lost_its_lease_writes_nothing(backend):
    execution_id = backend.start("contract.takeover")
    Takeover.backend, Takeover.execution_id = backend, execution_id

    assert backend.deliver(execution_id) == "lease-lost"

    execution = backend.get(execution_id)
    assert execution.result == {"value": 2, "after": 1}
    assert [(r.key, r.value) for r in backend.records(execution_id)] == [("contested", 2), ("after", 1)]
    assert calls == {"takeover": 2, "after": 1}


def _recorded_elsewhere():
    Takeover.backend.inject(
        Takeover.execution_id,
        StepRecordData(key="conflicted", kind="run", status="completed", attempts=1, value="theirs"),
    )
    return "mine"


@durableflow.workflow("contract.conflict")
def conflict_wf(ctx, params):
    return ctx.step.run("conflicted", _recorded_elsewhere)


def test_a_step_recorded_with_another_value_ends_the_delivery_for_a_clean_replay(backend):
    execution_id = backend.start("contract.conflict")
    Takeover.backend, Takeover.execution_id = backend, execution_id

    assert backend.deliver(execution_id) == "requeued"
    assert backend.get(execution_id).status == "pending"
    backend.deliver(execution_id)

    assert backend.get(execution_id).result == "theirs"
    assert [(r.key, r.value) for r in backend.records(execution_id)] == [("conflicted", "theirs")]


def test_a_leased_execution_cannot_be_claimed_twice(backend):
    execution_id = backend.start("contract.replay")
    holder = backend.journal(execution_id)
    assert holder.claim() is not None

    assert backend.journal(execution_id).claim() is None
    assert backend.deliver(execution_id) == "skipped"
    backend.advance(LEASE_SECONDS + 1)
    assert backend.journal(execution_id).claim() is not None  # the lease lapsed


def test_cancel_is_final_and_fences_out_the_delivery_holding_the_lease(backend):
    execution_id = backend.start("contract.replay")
    holder = backend.journal(execution_id)
    holder.claim()

    backend.cancel(execution_id, "customer asked")

    with pytest.raises(LeaseLost):
        holder.write_step(StepRecordData(key="first", kind="run", status="completed", value=1), new=True)
    execution = backend.get(execution_id)
    assert (execution.status, execution.error["message"]) == ("cancelled", "customer asked")
    assert backend.records(execution_id) == []
    assert backend.deliver(execution_id) == "skipped"
    with pytest.raises(durableflow.InvalidTransition):
        backend.cancel(execution_id)


# Starts --------------------------------------------------------------------------------------------------


def test_an_idempotency_key_returns_the_first_execution(backend):
    first = backend.start("contract.replay", {"a": 1}, idempotency_key="order-7")
    assert backend.start("contract.replay", {"a": 1}, idempotency_key="order-7") == first

    with pytest.raises(durableflow.WorkflowStartError) as caught:
        backend.start("contract.replay", {"a": 2}, idempotency_key="order-7")
    assert caught.value.code == "IDEMPOTENCY_CONFLICT"


@pytest.mark.parametrize(
    ("workflow", "params", "code"),
    [
        ("contract.nope", {}, "UNKNOWN_WORKFLOW"),
        ("contract.replay", {"x": float("inf")}, "INVALID_PARAMS"),
        ("contract.replay", {1: "int key"}, "INVALID_PARAMS"),
        ("contract.replay", {"when": object()}, "INVALID_PARAMS"),
        ("contract.replay", {"big": 1e300}, "INVALID_PARAMS"),
    ],
)
def test_invalid_starts_are_refused(backend, workflow, params, code):
    with pytest.raises(durableflow.WorkflowStartError) as caught:
        backend.start(workflow, params)
    assert caught.value.code == code


@durableflow.workflow("contract.bad-result")
def bad_result_wf(ctx, params):
    return {"when": ctx.now()}


def test_a_non_durable_result_fails_the_run(backend):
    execution_id = backend.start("contract.bad-result")
    backend.deliver(execution_id)
    execution = backend.get(execution_id)
    assert (execution.status, execution.error["code"]) == ("failed", "INVALID_RESULT")


@durableflow.workflow("contract.nested")
def nested_wf(ctx, params):
    return ctx.step.run("outer", lambda: ctx.step.run("inner", lambda: 1))


def test_a_step_inside_a_step_body_is_refused(backend):
    execution_id = backend.start("contract.nested")
    backend.deliver(execution_id)
    assert backend.get(execution_id).error["code"] == "NESTED_STEP"


@durableflow.workflow("contract.sleep-until")
def sleep_until_wf(ctx, params):
    start = ctx.now()
    ctx.step.sleep_until("until", start + timedelta(seconds=90))
    return (ctx.now() - start).total_seconds() >= 90


def test_sleep_until_waits_for_the_given_moment(backend):
    execution_id = backend.start("contract.sleep-until")
    backend.deliver(execution_id)
    waiting = backend.get(execution_id)
    assert waiting.waiting_for["kind"] == "timer"
    assert backend.run(execution_id).result is True


# The sweep -----------------------------------------------------------------------------------------------


def test_the_sweep_wakes_due_timers_and_leaves_the_others_waiting(backend):
    due = backend.start("contract.replay")  # sleeps 5 s
    later = backend.start("contract.sleep-until")  # sleeps 90 s
    backend.deliver(due), backend.deliver(later)

    backend.advance(6)
    backend.sweep()

    assert backend.get(due).status == "pending"
    assert backend.get(due).wake_at is None
    assert [r.status for r in backend.records(due) if r.key == "pause"] == ["completed"]
    assert backend.get(later).status == "waiting"
    assert backend.deliver(due) == "completed"
    assert backend.get(due).result == {"first": {"n": 1}, "second": 1}


def test_the_sweep_resends_a_wake_up_nobody_acted_on_once(backend):
    execution_id = backend.start("contract.replay")
    before = backend.get(execution_id).enqueued_at

    backend.advance(LEASE_SECONDS + 1)
    backend.sweep()
    resent = backend.get(execution_id).enqueued_at
    backend.sweep()

    assert resent > before
    assert backend.get(execution_id).enqueued_at == resent  # not overdue again yet
    assert backend.get(execution_id).status == "pending"


def test_wake_moves_only_waiting_executions(backend):
    waiting = backend.start("contract.sleep-until")
    backend.deliver(waiting)
    pending = backend.start("contract.replay")
    finished = backend.start("contract.decoded")
    backend.deliver(finished)

    woken = backend.engine.wake([waiting, pending, finished])

    assert woken == [waiting]
    assert [backend.get(pk).status for pk in (waiting, pending, finished)] == ["pending", "pending", "completed"]


@pytest.mark.parametrize("option", ["execution_id", "idempotency_key"])
@pytest.mark.parametrize("bad", ["id\x00x", "k\ud800"])
def test_ids_with_nul_or_lone_surrogates_are_refused_at_start(backend, option, bad):
    with pytest.raises(durableflow.WorkflowStartError) as caught:
        backend.start("contract.replay", {}, **{option: bad})
    assert caught.value.code == "INVALID_PARAMS"
    assert option in caught.value.message


def test_a_refused_params_value_carries_its_path(backend):
    with pytest.raises(durableflow.WorkflowStartError) as caught:
        backend.start("contract.replay", {"a": [1, float("nan")]})
    assert caught.value.detail["path"] == "/a/1"
