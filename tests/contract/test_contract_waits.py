"""Waits (events, signals, tokens, timeouts), held against both storages.

Deliveries run in-process under the test's control, so each rule is shown step by step;
the races are forced by doing the other side's work in the middle of a delivery.
"""

from __future__ import annotations

import pytest

import durableflow
from durableflow import WaitTimeout
from tests.harness import MemoryHarness

# Events ---------------------------------------------------------------------------------------


@durableflow.workflow("waits.event")
def event_wf(ctx, params):
    ctx.step.sleep("nap", params.get("nap", 0))
    return ctx.step.wait_for_event("approval", "order.approved", match={"order": params["order"]})


def test_a_waiting_execution_resumes_with_the_payload_of_the_event(backend):
    execution_id = backend.start("waits.event", {"order": 7})
    backend.deliver(execution_id)
    waiting = backend.get(execution_id)
    assert waiting.status == "waiting" and waiting.wake_at is None
    assert waiting.waiting_for == {
        "kind": "event",
        "event_type": "order.approved",
        "match": {"order": 7},
        "step": "approval",
        "until": None,
    }

    assert backend.send_event("order.approved", {"order": 7, "by": "ann"}) == 1

    assert backend.get(execution_id).status == "pending"  # woken at once, not by the sweep
    backend.deliver(execution_id)
    assert backend.get(execution_id).result == {"order": 7, "by": "ann"}
    record = backend.records(execution_id)[-1]
    assert (record.key, record.kind, record.status, record.attempts) == ("approval", "event", "completed", 1)


def test_an_event_published_before_the_wait_is_reached_is_seen(backend):
    execution_id = backend.start("waits.event", {"order": 8, "nap": 30})
    backend.deliver(execution_id)  # sleeping, its wait not reached yet

    assert backend.send_event("order.approved", {"order": 8}) == 0  # nobody waits yet
    assert backend.get(execution_id).status == "waiting"

    assert backend.run(execution_id).result == {"order": 8}


def test_an_event_that_does_not_match_is_not_taken(backend):
    execution_id = backend.start("waits.event", {"order": 9})
    backend.deliver(execution_id)

    assert backend.send_event("order.approved", {"order": 10}) == 0
    assert backend.send_event("order.shipped", {"order": 9}) == 0
    assert backend.send_event("order.approved", {"order": "9"}) == 0  # types matter
    assert backend.get(execution_id).status == "waiting"

    assert backend.send_event("order.approved", {"order": 9, "extra": [1]}) == 1
    assert backend.run(execution_id).result == {"order": 9, "extra": [1]}


def test_one_event_id_sent_twice_wakes_once(backend):
    first = backend.start("waits.event", {"order": 11})
    second = backend.start("waits.event", {"order": 11})
    backend.deliver(first)
    backend.deliver(second)

    assert backend.send_event("order.approved", {"order": 11}, event_id="approval-11") == 2
    assert backend.send_event("order.approved", {"order": 11}, event_id="approval-11") == 0

    assert backend.run(first).result == backend.run(second).result == {"order": 11}


@durableflow.workflow("waits.two-events")
def two_events_wf(ctx, params):
    ctx.step.sleep("nap", 10)
    first = ctx.step.wait_for_event("first", "tick")
    second = ctx.step.wait_for_event("second", "tick")
    return [first, second]


def test_each_event_satisfies_one_wait_of_an_execution_earliest_first(backend):
    execution_id = backend.start("waits.two-events")
    backend.deliver(execution_id)
    backend.send_event("tick", 1)
    backend.send_event("tick", 2)

    assert backend.run(execution_id).result == [1, 2]


def test_a_single_event_leaves_the_next_wait_waiting(backend):
    execution_id = backend.start("waits.two-events")
    backend.deliver(execution_id)
    backend.send_event("tick", 1)

    execution = backend.run(execution_id)
    assert (execution.status, execution.waiting_for["step"]) == ("waiting", "second")
    backend.send_event("tick", 2)
    assert backend.run(execution_id).result == [1, 2]


def test_events_published_before_the_execution_started_are_not_seen():
    backend = MemoryHarness()  # the ORM's clock is the database's: see the integration tests
    backend.send_event("order.approved", {"order": 12})
    backend.advance(1)
    execution_id = backend.start("waits.event", {"order": 12})
    backend.deliver(execution_id)
    assert backend.get(execution_id).status == "waiting"


def test_an_event_sent_while_the_waiter_registers_is_not_missed(backend, monkeypatch):
    """The publisher commits after the delivery looked for events and before it suspends:
    the publisher finds the open waiter and wakes the running execution, which replays."""
    execution_id = backend.start("waits.event", {"order": 13})
    real_events_for = backend.storage.events_for
    raced = []

    def events_for(waiter, **kwargs):
        found = real_events_for(waiter, **kwargs)
        if not raced:
            raced.append("publishing")
            raced[0] = backend.send_event("order.approved", {"order": 13})
        return found  # for the delivery: as read before the event was committed

    monkeypatch.setattr(backend.storage, "events_for", events_for)
    assert backend.deliver(execution_id) == "requeued"  # it suspended, but was woken meanwhile

    assert raced == [1]
    assert backend.get(execution_id).status == "pending"  # the suspension became a replay
    backend.deliver(execution_id)
    assert backend.get(execution_id).result == {"order": 13}


def test_event_arguments_are_checked(backend):
    with pytest.raises(durableflow.WorkflowValueError) as caught:
        backend.send_event("", {})
    assert caught.value.code == "INVALID_EVENT"
    with pytest.raises(durableflow.WorkflowValueError) as caught:
        backend.send_event("x", {"when": float("nan")})
    assert caught.value.code == "INVALID_PAYLOAD"
    with pytest.raises(durableflow.WorkflowValueError) as caught:
        backend.send_event("x", {}, event_id="e" * 191)
    assert caught.value.code == "INVALID_EVENT"


# Timeouts -------------------------------------------------------------------------------------


@durableflow.workflow("waits.timeout")
def timeout_wf(ctx, params):
    try:
        return ctx.step.wait_for_event("approval", "timeout.approved", timeout=params["timeout"])
    except WaitTimeout as exc:
        late = ctx.step.wait_for_event("late", "timeout.approved")
        return {"code": exc.code, "step": exc.detail.get("step"), "late": late}


def test_a_wait_timeout_raises_wait_timeout_into_the_workflow_at_that_step(backend):
    execution_id = backend.start("waits.timeout", {"timeout": 10})
    backend.deliver(execution_id)
    waiting = backend.get(execution_id)
    assert waiting.wake_at is not None and waiting.waiting_for["until"] is not None

    backend.advance(10.5)
    backend.sweep()  # the deadline is a row the sweep wakes
    assert backend.get(execution_id).status == "pending"
    backend.deliver(execution_id)

    # The expired wait took nothing: the next wait of the same type gets the next event.
    assert backend.send_event("timeout.approved", "yes") == 1
    execution = backend.run(execution_id)
    assert execution.result == {"code": "WAIT_TIMEOUT", "step": "approval", "late": "yes"}
    record = backend.records(execution_id)[0]
    assert (record.status, record.error["code"]) == ("failed", "WAIT_TIMEOUT")


def test_an_event_before_the_deadline_wins_over_the_timeout(backend):
    execution_id = backend.start("waits.timeout", {"timeout": 10})
    backend.deliver(execution_id)
    backend.advance(5)
    backend.send_event("timeout.approved", "in time")
    backend.advance(10)  # the delivery comes after the deadline: the satisfied wait stands
    assert backend.run(execution_id).result == "in time"


# Signals --------------------------------------------------------------------------------------


@durableflow.workflow("waits.signals")
def signals_wf(ctx, params):
    ctx.step.sleep("nap", 10)
    return [ctx.step.wait_for_signal(f"s{i}", "next") for i in range(3)]


def test_signals_sent_before_the_waits_arrive_in_order_to_consecutive_waits(backend):
    execution_id = backend.start("waits.signals")
    backend.deliver(execution_id)
    for n in (1, 2, 3):
        backend.signal(execution_id, "next", {"n": n})
    backend.signal(execution_id, "other", "not for these waits")

    assert backend.run(execution_id).result == [{"n": 1}, {"n": 2}, {"n": 3}]


def test_signals_are_per_execution(backend):
    one, two = backend.start("waits.signals"), backend.start("waits.signals")
    backend.deliver(one)
    backend.deliver(two)
    for n in (1, 2, 3):
        backend.signal(one, "next", n)
    backend.signal(two, "next", "two")
    assert backend.run(one).result == [1, 2, 3]
    assert backend.run(two).waiting_for["step"] == "s1"


def test_a_signal_to_a_finished_or_unknown_execution_is_refused(backend):
    execution_id = backend.start("waits.signals")
    backend.cancel(execution_id)
    with pytest.raises(durableflow.InvalidTransition):
        backend.signal(execution_id, "next", 1)
    with pytest.raises(durableflow.ExecutionNotFound):
        backend.signal("nobody", "next", 1)


# Tokens ---------------------------------------------------------------------------------------


@durableflow.workflow("waits.token")
def token_wf(ctx, params):
    ctx.step.sleep("nap", params.get("nap", 0))
    return ctx.step.wait_for_token("approve", token=params.get("token"))


def test_a_completed_token_resumes_the_run_with_its_payload_once(backend):
    execution_id = backend.start("waits.token", {})
    backend.deliver(execution_id)
    token = f"{execution_id}:approve"
    assert backend.get(execution_id).waiting_for["token"] == token

    assert backend.complete_token(token, {"ok": True}) == 1
    with pytest.raises(durableflow.InvalidTransition) as caught:
        backend.complete_token(token, {"ok": False})
    assert caught.value.code == "TOKEN_ALREADY_COMPLETED"
    assert backend.run(execution_id).result == {"ok": True}


def test_an_unknown_token_is_refused_and_nothing_is_written(backend):
    with pytest.raises(durableflow.ExecutionNotFound) as caught:
        backend.complete_token("no-such-token")
    assert caught.value.code == "TOKEN_NOT_FOUND"
    with pytest.raises(durableflow.ExecutionNotFound):
        backend.complete_token("no-such-token")  # still unknown: the refusal wrote nothing


def test_a_default_token_may_be_completed_before_its_wait_is_reached(backend):
    execution_id = backend.start("waits.token", {"nap": 30})
    backend.deliver(execution_id)
    assert backend.complete_token(f"{execution_id}:approve", "early") == 0
    assert backend.run(execution_id).result == "early"


def test_a_custom_token_is_known_once_its_wait_is_reached(backend):
    execution_id = backend.start("waits.token", {"nap": 30, "token": "invoice-42"})
    backend.deliver(execution_id)
    with pytest.raises(durableflow.ExecutionNotFound):
        backend.complete_token("invoice-42")
    backend.advance(31)
    backend.deliver(execution_id)
    assert backend.complete_token("invoice-42", 42) == 1
    assert backend.run(execution_id).result == 42


@durableflow.workflow("waits.uncaught-timeout")
def uncaught_timeout_wf(ctx, params):
    return ctx.step.wait_for_signal("answer", "answer", timeout=5)


def test_retry_of_a_run_failed_by_a_wait_timeout_waits_again(backend):
    execution_id = backend.start("waits.uncaught-timeout")
    failed = backend.run(execution_id)
    assert (failed.status, failed.error["code"], failed.error["step"]) == ("failed", "WAIT_TIMEOUT", "answer")

    backend.retry(execution_id)
    backend.deliver(execution_id)
    waiting = backend.get(execution_id)
    assert (waiting.status, waiting.waiting_for["step"]) == ("waiting", "answer")
    assert backend.signal(execution_id, "answer", 42) == 1
    assert backend.run(execution_id).result == 42


def test_cancel_closes_the_executions_waits(backend):
    execution_id = backend.start("waits.uncaught-timeout")
    backend.deliver(execution_id)
    backend.cancel(execution_id)
    assert backend.storage.open_waiters("signal", "answer", execution_id=execution_id) == []
    with pytest.raises(durableflow.InvalidTransition):
        backend.signal(execution_id, "answer", 1)


@durableflow.workflow("waits.any-event")
def any_event_wf(ctx, params):
    return ctx.step.wait_for_event("any", "waits.anything")


def test_an_event_without_a_payload_satisfies_a_wait_without_a_match(backend):
    execution_id = backend.start("waits.any-event")
    backend.deliver(execution_id)
    other = backend.start("waits.event", {"order": 1})
    backend.deliver(other)
    assert backend.send_event("order.approved") == 0  # a match is not contained in no payload
    assert backend.send_event("waits.anything") == 1
    assert backend.run(execution_id).status == "completed"
    assert backend.get(execution_id).result is None


# The earliest of several events ---------------------------------------------------------------


@durableflow.workflow("waits.any")
def any_wf(ctx, params):
    try:
        first = ctx.step.wait_for_any_event("decision", ["any.approved", "any.rejected"], timeout=params.get("timeout"))
    except WaitTimeout as exc:
        return {"timed_out": exc.detail.get("step")}
    after = ctx.step.wait_for_event("after", "any.approved")
    return {"first": list(first), "after": after}


def test_the_earliest_of_several_event_types_wins_and_the_others_are_not_taken(backend):
    execution_id = backend.start("waits.any", {})
    backend.deliver(execution_id)
    assert backend.get(execution_id).waiting_for["event_types"] == ["any.approved", "any.rejected"]

    assert backend.send_event("any.rejected", "no") == 1
    backend.deliver(execution_id)
    # The approval waiter was closed with the step: this approval goes to the next wait.
    assert backend.send_event("any.approved", "later") == 1
    execution = backend.run(execution_id)
    assert execution.result == {"first": ["any.rejected", "no"], "after": "later"}
    record = backend.records(execution_id)[0]
    assert (record.key, record.kind, record.status, record.value) == (
        "decision", "event", "completed", {"event": "any.rejected", "payload": "no"})  # fmt: skip


def test_of_two_events_published_before_the_wait_the_earlier_wins(backend):
    execution_id = backend.start("waits.any", {})
    backend.send_event("any.approved", "first")
    backend.send_event("any.rejected", "second")
    execution = backend.run(execution_id)
    # The rejection, published with the approval, was consumed with the step; the approval
    # wait afterwards needs a new event.
    assert execution.status == "waiting"
    assert backend.send_event("any.approved", "third") == 1
    assert backend.run(execution_id).result == {"first": ["any.approved", "first"], "after": "third"}


def test_the_earliest_of_several_events_times_out_and_closes_every_waiter(backend):
    execution_id = backend.start("waits.any", {"timeout": 10})
    backend.deliver(execution_id)
    backend.advance(10.5)
    backend.sweep()
    assert backend.run(execution_id).result == {"timed_out": "decision"}
    assert backend.send_event("any.rejected", "too late") == 0  # no waiter of the step is open


@durableflow.workflow("waits.any-bad")
def any_bad_wf(ctx, params):
    return ctx.step.wait_for_any_event("k", params["types"])


@pytest.mark.parametrize("types", [[], ["same", "same"], "any.approved", ["bad type!" * 40]])
def test_the_earliest_of_several_events_refuses_bad_types(backend, types):
    execution = backend.run(backend.start("waits.any-bad", {"types": types}))
    assert execution.status == "failed" and execution.error["code"] == "INVALID_EVENT", execution.error


# What satisfies a wait records it -----------------------------------------------------------


def _wait_record(backend, execution_id, key):
    return next(record for record in backend.records(execution_id) if record.key == key)


def test_the_event_that_satisfies_a_wait_completes_its_record_before_the_run_is_delivered(backend):
    execution_id = backend.start("waits.event", {"order": 31})
    backend.deliver(execution_id)
    assert _wait_record(backend, execution_id, "approval").status == "waiting"

    assert backend.send_event("order.approved", {"order": 31, "by": "bo"}, event_id="ev-31") == 1

    record = _wait_record(backend, execution_id, "approval")
    assert (record.status, record.attempts, record.value, record.meta["event_id"]) == (
        "completed", 1, {"order": 31, "by": "bo"}, "ev-31")  # fmt: skip
    assert record.meta["target"] == "order.approved"  # the record's own meta is kept
    assert backend.storage.get_waiter(execution_id, "approval").status == "satisfied"
    assert backend.get(execution_id).status == "pending"
    backend.deliver(execution_id)
    assert backend.get(execution_id).result == {"order": 31, "by": "bo"}


def test_a_signal_and_a_token_complete_the_records_of_their_waits(backend):
    signalled = backend.start("waits.signals")
    backend.deliver(signalled)
    backend.advance(11)
    backend.deliver(signalled)  # past the nap: waiting for the first signal
    assert backend.signal(signalled, "next", {"n": 1}) == 1
    assert (_wait_record(backend, signalled, "s0").status, _wait_record(backend, signalled, "s0").value) == (
        "completed", {"n": 1})  # fmt: skip

    tokened = backend.start("waits.token", {})
    backend.deliver(tokened)
    assert backend.complete_token(f"{tokened}:approve", "yes") == 1
    record = _wait_record(backend, tokened, "approve")
    assert (record.status, record.value, record.meta["event_id"]) == ("completed", "yes", f"{tokened}:approve")
    assert backend.run(tokened).result == "yes"


def test_the_earliest_of_several_events_is_recorded_by_its_delivery_not_by_the_publisher(backend):
    execution_id = backend.start("waits.any", {})
    backend.deliver(execution_id)
    assert backend.send_event("any.approved", "yes") == 1
    assert _wait_record(backend, execution_id, "decision").status == "waiting"  # its value names the type
    backend.deliver(execution_id)
    assert _wait_record(backend, execution_id, "decision").value == {"event": "any.approved", "payload": "yes"}


@durableflow.workflow("waits.listed")
def listed_wf(ctx, params):
    return ctx.step.wait_for_event("tags", "waits.tagged", match={"tags": ["a", "b"], "n": params["n"]})


def test_a_match_that_holds_a_list_takes_only_an_event_with_that_list(backend):
    """A list in a match must be equal in the payload (not merely contained in it)."""
    execution_id = backend.start("waits.listed", {"n": 1})
    backend.deliver(execution_id)
    assert backend.send_event("waits.tagged", {"tags": ["a", "b", "c"], "n": 1}) == 0
    assert backend.send_event("waits.tagged", {"tags": ["b", "a"], "n": 1}) == 0
    assert backend.get(execution_id).status == "waiting"
    assert backend.send_event("waits.tagged", {"tags": ["a", "b"], "n": 1, "more": True}) == 1
    assert backend.run(execution_id).result == {"tags": ["a", "b"], "n": 1, "more": True}


def test_one_event_satisfies_the_waits_of_many_executions_and_wakes_each_once(backend):
    ids = [backend.start("waits.any-event") for _ in range(5)]
    for execution_id in ids:
        backend.deliver(execution_id)
    assert backend.send_event("waits.anything", {"to": "all"}) == 5
    assert {backend.get(execution_id).status for execution_id in ids} == {"pending"}
    assert [backend.run(execution_id).result for execution_id in ids] == [{"to": "all"}] * 5
