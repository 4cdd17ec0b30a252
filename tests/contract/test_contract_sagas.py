"""Sagas and steering (compensation, cancellation, retry, rerun, fork), held against both storages."""

from __future__ import annotations

import pytest

import durableflow
from durableflow import InvalidTransition, WorkflowStartError
from durableflow.engine.records import StepRecordData
from tests.harness import LEASE_SECONDS


@pytest.fixture(autouse=True)
def _live(request):
    """Step bodies reach the test's harness through ``Live``."""
    if "backend" in request.fixturenames:
        Live.backend = request.getfixturevalue("backend")


class Live:
    """What step bodies reach from inside a delivery (the harness, the execution)."""

    backend = None
    execution_id = ""


calls: list[str] = []


@pytest.fixture(autouse=True)
def _reset():
    calls.clear()
    Toggle.skip_reserve = False


def act(name: str, value=None):
    calls.append(name)
    return value if value is not None else name


def undo(name: str):
    def compensation(result):
        calls.append(f"undo:{name}:{result}")

    compensation.__name__ = f"undo_{name}"
    return compensation


def broken_undo(result):
    calls.append(f"undo-broken:{result}")
    raise RuntimeError("the refund service is down")


class Crash(BaseException):
    """A worker dying mid-body: nothing catches it, nothing after it is recorded."""


def crashing_undo(result):
    calls.append(f"undo-crash:{result}")
    if calls.count(f"undo-crash:{result}") == 1:
        raise Crash("killed")


def cancel_from_inside(value):
    """A step body during which the execution is cancelled (from another process, say)."""
    calls.append(f"body:{value}")
    Live.backend.cancel(Live.execution_id, "customer asked")
    return value


# Workflows -------------------------------------------------------------------------------------


@durableflow.workflow("sagas.trip")
def trip_wf(ctx, params):
    flight = ctx.step.run("flight", act, "flight", "F1", compensate=undo("flight"))
    hotel = ctx.step.run("hotel", act, "hotel", "H1", compensate=undo("hotel"))
    if params.get("wait"):
        ctx.step.wait_for_signal("confirm", "confirm")
    if params.get("fail"):
        ctx.step.run("car", _no_car)
    if params.get("compensate"):
        ctx.compensate()
    return {"flight": flight, "hotel": hotel}


def _no_car():
    calls.append("car")
    raise LookupError("no car left")


@durableflow.workflow("sagas.partly-broken")
def partly_broken_wf(ctx, params):
    ctx.step.run("a", act, "a", compensate=undo("a"))
    ctx.step.run("b", act, "b", compensate=broken_undo)
    ctx.step.run("c", act, "c", compensate=crashing_undo if params.get("crash") else undo("c"))
    if params.get("wait"):
        ctx.step.wait_for_signal("go", "go")
    ctx.step.run("d", _no_car)


@durableflow.workflow("sagas.plain-failure")
def plain_failure_wf(ctx, params):
    ctx.step.run("a", act, "a")
    ctx.step.run("b", _no_car)


@durableflow.workflow("sagas.cancel-while-running")
def cancel_while_running_wf(ctx, params):
    ctx.step.run("booked", act, "booked", compensate=undo("booked"))
    for index in range(3):
        try:
            ctx.step.run(f"try-{index}", cancel_from_inside if index == 0 else act, f"try-{index}")
        except BaseException:  # noqa: BLE001 - what the test shows cannot stop a cancel
            calls.append(f"swallowed:{index}")
    ctx.step.run("after", act, "after")
    return "done"


@durableflow.workflow("sagas.plain-running")
def plain_running_wf(ctx, params):
    ctx.step.run("first", act, "first")
    ctx.step.run("cancelled-here", cancel_from_inside, "second")
    ctx.step.run("never", act, "never")


class Toggle:
    skip_reserve = False  # the workflow's code changed between two deliveries


@durableflow.workflow("sagas.changed")
def changed_wf(ctx, params):
    if not Toggle.skip_reserve:
        ctx.step.run("reserve", act, "reserve", compensate=undo("reserve"))
    ctx.step.wait_for_signal("go", "go")


@durableflow.workflow("sagas.nested-undo")
def nested_undo_wf(ctx, params):
    def sneaky(result):
        ctx.step.run("inside", act, "inside")

    ctx.step.run("a", act, "a", compensate=sneaky)
    ctx.compensate()


@durableflow.workflow("sagas.child")
def child_wf(ctx, params):
    ctx.step.run("hold", act, f"hold-{params['n']}", compensate=undo(f"child-{params['n']}"))
    ctx.step.wait_for_signal("go", "go")


@durableflow.workflow("sagas.parent")
def parent_wf(ctx, params):
    ids = [ctx.step.start(f"start-{n}", "sagas.child", {"n": n}) for n in range(2)]
    return [ctx.step.wait_for_execution(f"wait-{n}", pk) for n, pk in enumerate(ids)]


def _entries(report):
    return [(entry["step"], entry["status"], (entry["error"] or {}).get("code")) for entry in report]


# Compensation on errors and on ctx.compensate() ----------------------------------------------------------


def test_an_uncaught_error_runs_the_compensations_last_completed_first_and_ends_compensated(backend):
    execution_id = backend.start("sagas.trip", {"fail": True})

    done = backend.run(execution_id)

    assert done.status == "compensated"
    assert (done.error["type"], done.error["message"], done.error["step"]) == ("builtins.LookupError", "no car left", "car")
    assert calls == ["flight", "hotel", "car", "undo:hotel:H1", "undo:flight:F1"]
    assert _entries(done.compensations) == [("hotel", "completed", None), ("flight", "completed", None)]
    assert all(entry["duration"] >= 0 and entry["started_at"] for entry in done.compensations)
    journal = {r.key: (r.kind, r.status) for r in backend.records(execution_id)}
    assert journal["$compensate:hotel"] == journal["$compensate:flight"] == ("compensation", "completed")
    with pytest.raises(durableflow.ExecutionFailed) as failed:
        backend.engine.outcome(done)
    assert failed.value.status == "compensated"


def test_a_failing_compensation_is_recorded_and_the_others_still_run(backend):
    execution_id = backend.start("sagas.partly-broken", {})

    done = backend.run(execution_id)

    assert done.status == "compensation_failed"
    assert done.error["message"] == "no car left"  # the run's own error stays
    assert calls == ["a", "b", "c", "car", "undo:c:c", "undo-broken:b", "undo:a:a"]
    assert _entries(done.compensations) == [("c", "completed", None), ("b", "failed", "STEP_FAILED"), ("a", "completed", None)]
    assert done.compensations[1]["error"]["message"] == "the refund service is down"
    record = next(r for r in backend.records(execution_id) if r.key == "$compensate:b")
    assert (record.status, "Traceback" in record.error["traceback"]) == ("failed", True)


def test_an_uncaught_error_without_compensations_fails_the_run_and_stays_retryable(backend):
    execution_id = backend.start("sagas.plain-failure")

    done = backend.run(execution_id)

    assert (done.status, done.compensations) == ("failed", None)
    backend.retry(execution_id)
    assert backend.get(execution_id).status == "pending"


def test_ctx_compensate_ends_the_run_compensated(backend):
    execution_id = backend.start("sagas.trip", {"compensate": True})

    done = backend.run(execution_id)

    assert (done.status, done.error) == ("compensated", None)
    assert calls == ["flight", "hotel", "undo:hotel:H1", "undo:flight:F1"]


def test_a_compensation_that_calls_a_step_is_recorded_as_failed(backend):
    execution_id = backend.start("sagas.nested-undo")

    done = backend.run(execution_id)

    assert done.status == "compensation_failed"
    assert _entries(done.compensations) == [("a", "failed", "NESTED_STEP")]
    assert done.error["code"] == "COMPENSATION_FAILED"
    assert "inside" not in calls


# Cancellation ------------------------------------------------------------------------------------------------


def test_cancel_of_a_waiting_run_delivers_it_at_once_and_compensates_in_reverse_order_once(backend):
    execution_id = backend.start("sagas.trip", {"wait": True})
    backend.deliver(execution_id)
    assert backend.get(execution_id).status == "waiting"

    requested = backend.cancel(execution_id, "customer asked")
    assert (requested.status, requested.cancel_requested["message"]) == ("pending", "customer asked")
    assert backend.deliver(execution_id) == "unwound"

    done = backend.get(execution_id)
    assert (done.status, done.error) == ("cancelled", {"code": "CANCELLED", "message": "customer asked"})
    assert calls == ["flight", "hotel", "undo:hotel:H1", "undo:flight:F1"]
    assert _entries(done.compensations) == [("hotel", "completed", None), ("flight", "completed", None)]
    # Never runs again, whatever arrives later.
    assert backend.deliver(execution_id) == "skipped"
    backend.advance(LEASE_SECONDS * 10)
    backend.sweep()
    assert backend.deliver(execution_id) == "skipped"
    assert calls.count("undo:hotel:H1") == calls.count("undo:flight:F1") == 1
    with pytest.raises(InvalidTransition, match="is cancelled; it cannot be cancelled"):
        backend.cancel(execution_id)


def test_cancel_without_a_compensable_step_is_immediate(backend):
    execution_id = backend.start("sagas.plain-failure")

    cancelled = backend.cancel(execution_id)

    assert (cancelled.status, cancelled.compensations) == ("cancelled", None)
    assert backend.deliver(execution_id) == "skipped"


def test_a_second_cancel_while_compensations_are_due_changes_nothing(backend):
    execution_id = backend.start("sagas.trip", {"wait": True})
    backend.deliver(execution_id)
    backend.cancel(execution_id, "first")

    again = backend.cancel(execution_id, "second")

    assert again.cancel_requested["message"] == "first"
    backend.deliver(execution_id)
    assert backend.get(execution_id).error["message"] == "first"


def test_a_step_that_finishes_after_the_cancel_is_refused_and_except_base_exception_cannot_swallow_it(backend):
    execution_id = backend.start("sagas.cancel-while-running")
    Live.execution_id = execution_id

    assert backend.deliver(execution_id) == "lease-lost"  # the running delivery is fenced out
    assert backend.deliver(execution_id) == "unwound"

    done = backend.get(execution_id)
    assert done.status == "cancelled"
    assert [r.key for r in backend.records(execution_id)] == ["booked", "$compensate:booked"]
    # The body ran once; its result was refused; the code swallowed every interrupt and still
    # ran nothing more.
    assert calls == [
        "booked",
        "body:try-0",
        "swallowed:0",
        "swallowed:1",
        "swallowed:2",
        "swallowed:0",
        "swallowed:1",
        "swallowed:2",
        "undo:booked:booked",
    ]
    assert "after" not in calls


def test_a_delivery_running_when_a_plain_cancel_lands_records_nothing_after_it(backend):
    execution_id = backend.start("sagas.plain-running")
    Live.execution_id = execution_id

    assert backend.deliver(execution_id) == "lease-lost"

    assert backend.get(execution_id).status == "cancelled"
    assert [r.key for r in backend.records(execution_id)] == ["first"]
    assert calls == ["first", "body:second"]


def test_a_crash_during_a_compensation_never_runs_it_twice(backend):
    execution_id = backend.start("sagas.partly-broken", {"crash": True, "wait": True})
    backend.deliver(execution_id)
    backend.cancel(execution_id)

    with pytest.raises(Crash):
        backend.deliver(execution_id)  # the worker dies inside the compensation of "c"
    assert backend.get(execution_id).status == "running"
    backend.advance(LEASE_SECONDS + 1)
    assert backend.deliver(execution_id) == "unwound"

    done = backend.get(execution_id)
    assert done.status == "cancelled"
    assert [c for c in calls if c.startswith("undo")] == ["undo-crash:c", "undo-broken:b", "undo:a:a"]
    assert _entries(done.compensations) == [
        ("c", "failed", "COMPENSATION_INTERRUPTED"),
        ("b", "failed", "STEP_FAILED"),
        ("a", "completed", None),
    ]


def test_a_compensable_step_the_replay_does_not_reach_is_reported(backend):
    execution_id = backend.start("sagas.changed")
    backend.deliver(execution_id)
    Toggle.skip_reserve = True  # a deploy changed the code under the waiting run

    backend.cancel(execution_id)
    backend.deliver(execution_id)

    done = backend.get(execution_id)
    assert done.status == "cancelled"
    assert _entries(done.compensations) == [("reserve", "failed", "COMPENSATION_UNREACHED")]


def test_cancelling_a_parent_cancels_its_children_and_each_runs_its_own_compensations(backend):
    parent = backend.start("sagas.parent")
    backend.deliver(parent)
    children = [r.value for r in backend.records(parent) if r.kind == "start"]
    for child in children:
        backend.deliver(child)
    assert [backend.get(child).status for child in children] == ["waiting", "waiting"]

    assert backend.cancel(parent).status == "cancelled"  # no compensation of its own: at once

    assert [backend.get(child).status for child in children] == ["pending", "pending"]
    for child in children:
        backend.deliver(child)
    assert [backend.get(child).status for child in children] == ["cancelled", "cancelled"]
    assert sorted(c for c in calls if c.startswith("undo")) == ["undo:child-0:hold-0", "undo:child-1:hold-1"]
    assert backend.get(children[0]).error["message"] == f"its parent {parent} was cancelled"


def test_cancel_of_a_pending_run_that_never_ran_is_immediate(backend):
    execution_id = backend.start("sagas.trip", {"wait": True})

    assert backend.cancel(execution_id).status == "cancelled"
    assert calls == []


# Retry, rerun, fork ---------------------------------------------------------------------------------------------


def _fails_once(name):
    calls.append(name)
    if calls.count(name) == 1:
        raise LookupError(f"{name} failed")
    return name


@durableflow.workflow("sagas.abc")
def abc_wf(ctx, params):
    a = ctx.step.run("a", act, "a")
    b = ctx.step.run("b", _fails_once if params.get("flaky") else act, "b")
    c = ctx.step.run("c", act, "c")
    return [a, b, c, ctx.random()]


def test_retry_resumes_a_failed_run_from_the_failed_step(backend):
    execution_id = backend.start("sagas.abc", {"flaky": True})
    assert backend.run(execution_id).status == "failed"

    backend.retry(execution_id)
    done = backend.run(execution_id)

    assert done.result[:3] == ["a", "b", "c"]
    assert {name: calls.count(name) for name in "abc"} == {"a": 1, "b": 2, "c": 1}


def test_retry_refuses_a_run_that_did_not_fail(backend):
    execution_id = backend.start("sagas.abc", {})
    backend.run(execution_id)

    with pytest.raises(InvalidTransition) as refused:
        backend.retry(execution_id)
    assert refused.value.code == "INVALID_TRANSITION"


def test_rerun_starts_a_new_linked_execution_with_the_same_params(backend):
    execution_id = backend.start("sagas.abc", {"x": 1})
    first = backend.run(execution_id)

    rerun = backend.rerun(execution_id)
    again = backend.run(rerun.id)

    assert rerun.id != execution_id
    assert (rerun.workflow, rerun.params, rerun.origin_id, rerun.origin_kind) == ("sagas.abc", {"x": 1}, execution_id, "rerun")
    assert again.result[:3] == first.result[:3]
    assert {name: calls.count(name) for name in "abc"} == {"a": 2, "b": 2, "c": 2}
    assert backend.get(execution_id).status == "completed"


def test_rerun_and_fork_refuse_an_unfinished_execution(backend):
    execution_id = backend.start("sagas.trip", {"wait": True})
    backend.deliver(execution_id)

    for verb in (backend.rerun, lambda pk: backend.fork(pk, from_step="hotel")):
        with pytest.raises(InvalidTransition) as refused:
            verb(execution_id)
        assert refused.value.code == "NOT_FINISHED"


def test_fork_keeps_the_journal_before_the_step_and_runs_the_rest_anew(backend):
    execution_id = backend.start("sagas.abc", {})
    first = backend.run(execution_id)

    fork = backend.fork(execution_id, from_step="b")
    assert [r.key for r in backend.records(fork.id)] == ["a"]
    assert (fork.origin_id, fork.origin_kind, fork.origin_step) == (execution_id, "fork", "b")
    done = backend.run(fork.id)

    assert {name: calls.count(name) for name in "abc"} == {"a": 1, "b": 2, "c": 2}
    assert done.result == first.result  # the same random draw too: the fork keeps the seed
    assert [r.key for r in backend.records(fork.id)] == ["a", "b", "c"]


def test_fork_from_the_failed_step_runs_it_again(backend):
    execution_id = backend.start("sagas.abc", {"flaky": True})
    backend.run(execution_id)

    fork = backend.fork(execution_id, from_step="b")

    assert backend.run(fork.id).status == "completed"
    assert {name: calls.count(name) for name in "abc"} == {"a": 1, "b": 2, "c": 1}


@pytest.mark.parametrize("step", ["nope", "$now:1", "", None])
def test_fork_refuses_a_step_the_journal_does_not_have(backend, step):
    execution_id = backend.start("sagas.abc", {})
    backend.run(execution_id)
    pending = set(backend.storage.execution_ids(statuses=["pending"]))  # live tests may leave some

    with pytest.raises(WorkflowStartError) as refused:
        backend.fork(execution_id, from_step=step)
    assert refused.value.code == "UNKNOWN_STEP"
    assert set(backend.storage.execution_ids(statuses=["pending"])) == pending  # no fork was written


def test_fork_refuses_an_execution_of_another_version(backend):
    execution_id = backend.start("sagas.abc", {})
    backend.run(execution_id)
    backend.storage.update_execution(execution_id, {"version": "0"})

    with pytest.raises(WorkflowStartError) as refused:
        backend.fork(execution_id, from_step="b")
    assert refused.value.code == "FORK_VERSION_MISMATCH"


def test_a_fork_of_a_compensated_run_compensates_its_own_kept_steps(backend):
    execution_id = backend.start("sagas.trip", {"fail": True})
    backend.run(execution_id)
    calls.clear()

    fork = backend.fork(execution_id, from_step="car")
    done = backend.run(fork.id)

    assert done.status == "compensated"
    assert calls == ["car", "undo:hotel:H1", "undo:flight:F1"]  # kept steps replayed, not run


def test_an_injected_running_compensation_record_is_closed_not_run(backend):
    """A compensation started by a delivery that died (the record alone tells)."""
    execution_id = backend.start("sagas.trip", {"wait": True})
    backend.deliver(execution_id)
    backend.cancel(execution_id)
    backend.inject(
        execution_id,
        StepRecordData(key="$compensate:hotel", kind="compensation", status="running", attempts=1, meta={"step": "hotel"}),
    )

    backend.deliver(execution_id)

    assert calls == ["flight", "hotel", "undo:flight:F1"]
    assert _entries(backend.get(execution_id).compensations)[0] == ("hotel", "failed", "COMPENSATION_INTERRUPTED")


@durableflow.workflow("sagas.compensable-body-cancelled")
def compensable_body_cancelled_wf(ctx, params):
    ctx.step.run("charge", cancel_from_inside, "charge", compensate=undo("charge"))


def test_a_compensable_step_still_running_at_the_cancel_is_not_compensated(backend):
    """Its result is refused, so there is nothing to give its compensation: the run ends
    cancelled with an empty report (a body that must be undone then is made idempotent)."""
    execution_id = backend.start("sagas.compensable-body-cancelled")
    Live.execution_id = execution_id

    assert backend.deliver(execution_id) == "lease-lost"
    assert backend.get(execution_id).status == "pending"  # marked compensable before the body ran
    backend.deliver(execution_id)

    done = backend.get(execution_id)
    assert (done.status, done.compensations) == ("cancelled", [])
    assert calls == ["body:charge"]


@durableflow.workflow("sagas.cancel-between-steps")
def cancel_between_steps_wf(ctx, params):
    ctx.step.run("a", act, "a")
    Live.backend.cancel(ctx.execution_id)  # from outside, between two steps
    ctx.step.run("b", act, "b", compensate=undo("b"))


def test_a_cancel_before_a_compensable_step_keeps_its_body_from_running(backend):
    execution_id = backend.start("sagas.cancel-between-steps")

    assert backend.deliver(execution_id) == "lease-lost"  # the mark is refused: the lease is gone

    done = backend.get(execution_id)
    assert (done.status, done.compensable) == ("cancelled", False)
    assert calls == ["a"]
    assert [r.key for r in backend.records(execution_id)] == ["a"]


def test_the_tester_runs_compensations_as_the_workers_do():
    from durableflow.testing import WorkflowTester

    tester = WorkflowTester()
    execution = tester.start("sagas.trip", {"wait": True})
    tester.run()

    tester.cancel(execution.id)
    tester.run()

    report = tester.get(execution.id).compensations
    assert [(c["step"], c["status"]) for c in report] == [("hotel", "completed"), ("flight", "completed")]
    with pytest.raises(durableflow.ExecutionFailed):
        tester.result(execution.id)
