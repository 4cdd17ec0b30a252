"""Deadlines, held against both storages: ``start(..., deadline=)`` sets ``deadline_at``, and the
sweep cancels a run still unfinished then (``DEADLINE_EXCEEDED``), with its compensations, once;
what is not a deadline is refused before anything is written."""

from __future__ import annotations

import math
from datetime import datetime, timedelta, timezone

import pytest

import durableflow
from durableflow import ChildExecutionError, WorkflowStartError
from durableflow.engine.starts import MAX_DEADLINE_SECONDS

calls: list[str] = []


@pytest.fixture(autouse=True)
def _reset():
    calls.clear()


def reserve(order):
    calls.append(f"reserve:{order}")
    return f"r-{order}"


def release(reservation):
    calls.append(f"release:{reservation}")


@durableflow.workflow("contract.deadline-nap")
def nap_wf(ctx, params):
    ctx.step.sleep("nap", (params or {}).get("seconds", 60))
    return "woke"


@durableflow.workflow("contract.deadline-saga")
def saga_wf(ctx, params):
    ctx.step.run("reserve", reserve, params["order"], compensate=release)
    ctx.step.sleep("nap", 60)
    return "shipped"


@durableflow.workflow("contract.deadline-parent")
def parent_wf(ctx, params):
    try:
        return ctx.step.invoke("child", "contract.deadline-nap", {"seconds": 60}, deadline=10)
    except ChildExecutionError as exc:
        return {"child": exc.status, "code": (exc.error or {}).get("code")}


@durableflow.workflow("contract.deadline-loop")
def loop_wf(ctx, params):
    if params["round"] < 1:
        ctx.continue_as_new({"round": params["round"] + 1})
    ctx.step.sleep("nap", 60)


def test_a_run_unfinished_at_its_deadline_is_cancelled_by_the_sweep(backend):
    execution_id = backend.start("contract.deadline-nap", deadline=30)
    backend.deliver(execution_id)
    execution = backend.get(execution_id)
    assert execution.status == "waiting"
    assert abs((execution.deadline_at - execution.created_at).total_seconds() - 30) < 5

    backend.advance(29)
    assert backend.sweep()["deadlines"] == 0
    assert backend.get(execution_id).status == "waiting"

    backend.advance(2)
    assert backend.sweep()["deadlines"] == 1
    execution = backend.get(execution_id)
    assert execution.status == "cancelled"
    assert execution.error["code"] == "DEADLINE_EXCEEDED"
    assert "deadline" in execution.error["message"]
    # Once: a later sweep finds nothing to cancel.
    assert backend.sweep()["deadlines"] == 0


def test_its_compensations_run_once_then_it_ends_cancelled_with_the_deadline_code(backend):
    execution_id = backend.start("contract.deadline-saga", {"order": 7}, deadline=5)
    backend.deliver(execution_id)
    assert calls == ["reserve:7"]

    backend.advance(6)
    assert backend.sweep()["deadlines"] == 1
    assert backend.sweep()["deadlines"] == 0  # its cancel is asked: not asked twice
    backend.run(execution_id)

    execution = backend.get(execution_id)
    assert (execution.status, execution.error["code"]) == ("cancelled", "DEADLINE_EXCEEDED")
    assert calls == ["reserve:7", "release:r-7"]
    assert [c["step"] for c in execution.compensations] == ["reserve"]


def test_a_run_that_never_started_is_cancelled_too(backend):
    execution_id = backend.start("contract.deadline-nap", deadline=1)
    backend.advance(2)
    backend.sweep()
    assert backend.get(execution_id).status == "cancelled"
    assert backend.deliver(execution_id) != "completed"
    assert backend.get(execution_id).status == "cancelled"


def test_a_finished_run_and_a_run_without_a_deadline_are_left_alone(backend):
    done = backend.start("contract.deadline-nap", {"seconds": 0}, deadline=5)
    backend.deliver(done)
    plain = backend.start("contract.deadline-nap")
    backend.deliver(plain)

    backend.advance(10)
    assert backend.sweep()["deadlines"] == 0
    assert backend.get(done).status == "completed"
    assert backend.get(plain).status == "waiting"
    assert backend.get(plain).deadline_at is None


def test_an_aware_datetime_is_a_deadline_and_start_many_gives_each_its_own(backend):
    when = backend.now() + timedelta(seconds=20)
    one = backend.start("contract.deadline-nap", deadline=when)
    assert backend.get(one).deadline_at == when

    many = backend.engine.start_many("contract.deadline-nap", [{"seconds": 60}] * 3, deadline=20)
    assert all(execution.deadline_at is not None for execution in many)
    backend.advance(21)
    assert backend.sweep()["deadlines"] == 4
    assert {backend.get(e.id).status for e in many} | {backend.get(one).status} == {"cancelled"}


def test_a_child_s_deadline_cancels_the_child_and_its_parent_sees_why(backend):
    parent = backend.start("contract.deadline-parent")
    backend.deliver(parent)
    child = backend.get(parent).waiting_for["execution_id"]
    backend.deliver(child)
    assert backend.get(child).deadline_at is not None

    backend.advance(11)
    backend.sweep()
    backend.run(parent)

    assert backend.get(child).error["code"] == "DEADLINE_EXCEEDED"
    assert backend.get(parent).result == {"child": "cancelled", "code": "DEADLINE_EXCEEDED"}


def test_continue_as_new_keeps_the_deadline(backend):
    first = backend.start("contract.deadline-loop", {"round": 0}, deadline=30)
    backend.deliver(first)
    second = backend.get(first).continued_as
    assert second is not None
    assert backend.get(second).deadline_at == backend.get(first).deadline_at


BAD = {
    "zero": 0,
    "negative": -1,
    "nan": math.nan,
    "inf": math.inf,
    "a century and a second": MAX_DEADLINE_SECONDS + 1,
    "true": True,
    "text": "5",
    "naive": datetime(2030, 1, 1),
}


@pytest.mark.parametrize("name", list(BAD))
def test_what_is_not_a_deadline_is_refused_and_nothing_is_written(backend, name):
    for start in (
        lambda: backend.start("contract.deadline-nap", execution_id=f"bad-{name}", deadline=BAD[name]),
        lambda: backend.engine.start_many("contract.deadline-nap", [None], deadline=BAD[name]),
        lambda: backend.engine.start_many("contract.deadline-nap", [], deadline=BAD[name]),
    ):
        with pytest.raises(WorkflowStartError) as caught:
            start()
        assert caught.value.code == "INVALID_PARAMS"
        assert caught.value.message.startswith("deadline: ")
    assert backend.storage.get_execution(f"bad-{name}") is None


def test_a_passed_datetime_is_accepted_and_the_next_sweep_cancels_the_run(backend):
    execution_id = backend.start("contract.deadline-nap", deadline=datetime(2000, 1, 1, tzinfo=timezone.utc))
    assert backend.sweep()["deadlines"] == 1
    assert backend.get(execution_id).error["code"] == "DEADLINE_EXCEEDED"
