"""Rate limits, held against both storages: ``ctx.step.run(..., rate_limit=RateLimit(key, limit,
window))`` admits at most ``limit`` units per ``window`` seconds per key, whichever execution asks;
a step over the limit waits durably (``waiting_for.kind == "rate_limit"``, woken when a unit
frees); the admission is journaled with the step, so a retry, a replay or a crash mid-body takes
no second unit; older waiting requests go first; a bad key is refused with a code."""

from __future__ import annotations

from datetime import timedelta

import pytest

import durableflow
from durableflow import RateLimit, RetryableError, WorkflowValueError
from durableflow.engine.context import parse_iso
from durableflow.engine.memory import ManualClock
from durableflow.engine.ratelimits import admission_time, fits_now
from tests.harness import LEASE_SECONDS

calls: list[str] = []


@pytest.fixture(autouse=True)
def _reset():
    calls.clear()


class Crash(BaseException):
    """A worker dying mid-body: nothing catches it, nothing after it is recorded."""


def call(tag):
    calls.append(tag)
    return tag


def flaky(tag):
    calls.append(tag)
    if calls.count(tag) == 1:
        raise RetryableError("the service hiccupped", retry_interval=1)
    return tag


def crash_once(tag):
    calls.append(tag)
    if calls.count(tag) == 1:
        raise Crash(tag)
    return tag


BODIES = {"call": call, "flaky": flaky, "crash": crash_once}


@durableflow.workflow("contract.rate-limited")
def limited_wf(ctx, params):
    limit = RateLimit(params.get("key", "api"), params.get("limit", 2), params.get("window", 10.0))
    body = BODIES[params.get("body", "call")]
    return ctx.step.run("call", body, params["tag"], rate_limit=limit, queue=params.get("queue"))


def per_customer(customer, tag):
    return f"api:{customer}"


@durableflow.workflow("contract.rate-per-customer")
def per_customer_wf(ctx, params):
    limit = RateLimit(per_customer, 1, 60.0)
    return ctx.step.run("call", lambda customer, tag: call(tag), params["customer"], params["tag"], rate_limit=limit)


BAD_KEYS = {
    "empty": lambda tag: "",
    "not text": lambda tag: 42,
    "raises": lambda tag: {}["missing"],
    "NUL": lambda tag: "api\x00",
    "too long": lambda tag: "k" * 201,
}


@durableflow.workflow("contract.rate-bad-key")
def bad_key_wf(ctx, params):
    try:
        ctx.step.run("call", call, "x", rate_limit=RateLimit(BAD_KEYS[params["bad"]], 1, 1.0))
    except WorkflowValueError as exc:
        return {"caught": exc.code, "message": exc.message}
    return {"ran": True}


@durableflow.workflow("contract.rate-not-an-option")
def not_an_option_wf(ctx, params):
    try:
        ctx.step.run("call", call, "x", rate_limit="api")
    except TypeError as exc:
        return {"caught": str(exc)}
    return {"ran": True}


def _start(backend, tag, **params):
    return backend.start("contract.rate-limited", {"tag": tag, **params})


def _record(backend, execution_id):
    (record,) = [r for r in backend.records(execution_id) if r.key == "call"]
    return record


def test_steps_within_the_limit_are_admitted_and_journal_their_admission(backend):
    first, second = _start(backend, "a"), _start(backend, "b")
    backend.deliver(first)
    backend.deliver(second)

    assert [backend.get(e).result for e in (first, second)] == ["a", "b"]
    for execution_id in (first, second):
        meta = _record(backend, execution_id).meta
        assert meta["rate_limit"] == "api"
        assert abs((parse_iso(meta["admitted_at"]) - backend.now()).total_seconds()) < 5
    assert backend.admissions("api") == [(first, "call", 1, True), (second, "call", 1, True)]


def test_a_step_over_the_limit_waits_durably_until_a_unit_frees(backend):
    first, second, third = (_start(backend, tag) for tag in "abc")
    for execution_id in (first, second, third):
        backend.deliver(execution_id)

    waiting = backend.get(third)
    assert waiting.status == "waiting"
    assert calls == ["a", "b"]  # the third body did not run
    oldest = parse_iso(_record(backend, first).meta["admitted_at"])
    assert abs((waiting.wake_at - (oldest + timedelta(seconds=10))).total_seconds()) < 0.01
    assert waiting.waiting_for == {
        "kind": "rate_limit",
        "step": "call",
        "key": "api",
        "until": waiting.waiting_for["until"],
    }
    assert parse_iso(waiting.waiting_for["until"]) == waiting.wake_at
    record = _record(backend, third)
    assert (record.status, record.attempts, record.meta["rate_limit"]) == ("waiting", 0, "api")
    assert "admitted_at" not in record.meta

    backend.advance(9)
    assert backend.deliver(third) != "completed" and backend.get(third).status == "waiting"  # not due yet
    backend.advance(1.5)
    backend.sweep()
    backend.run(third)

    assert backend.get(third).result == "c"
    assert calls == ["a", "b", "c"]
    record = _record(backend, third)
    assert (record.status, record.attempts) == ("completed", 1)
    assert parse_iso(record.meta["admitted_at"]) >= oldest + timedelta(seconds=10)


def test_a_retry_of_the_body_takes_no_second_unit(backend):
    execution_id = _start(backend, "a", body="flaky", limit=1, window=300.0)
    backend.deliver(execution_id)
    assert backend.get(execution_id).waiting_for["kind"] == "retry"
    admitted = _record(backend, execution_id).meta["admitted_at"]

    backend.advance(1.5)
    backend.deliver(execution_id)

    assert backend.get(execution_id).result == "a"
    assert calls == ["a", "a"]
    record = _record(backend, execution_id)
    assert (record.attempts, record.meta["admitted_at"]) == (2, admitted)
    assert backend.admissions("api") == [(execution_id, "call", 1, True)]
    # The one unit is still taken: another step of the key waits.
    other = _start(backend, "b", limit=1, window=300.0)
    backend.deliver(other)
    assert backend.get(other).waiting_for["kind"] == "rate_limit"


def test_a_replay_after_a_crash_mid_body_takes_no_second_unit(backend):
    execution_id = _start(backend, "a", body="crash", limit=1, window=300.0)
    with pytest.raises(Crash):
        backend.deliver(execution_id)  # admitted, then the worker died in the body
    assert backend.admissions("api") == [(execution_id, "call", 1, True)]

    backend.advance(LEASE_SECONDS + 1)
    backend.deliver(execution_id)

    assert backend.get(execution_id).result == "a"
    assert calls == ["a", "a"]
    assert backend.admissions("api") == [(execution_id, "call", 1, True)]


def test_a_replay_of_a_completed_step_asks_the_limiter_nothing(backend):
    execution_id = backend.start("contract.rate-replay")
    backend.deliver(execution_id)
    backend.advance(1.5)
    backend.deliver(execution_id)

    assert backend.get(execution_id).result == "a"
    assert calls == ["a"]
    assert backend.admissions("api") == [(execution_id, "call", 1, True)]


@durableflow.workflow("contract.rate-replay")
def replay_wf(ctx, params):
    value = ctx.step.run("call", call, "a", rate_limit=RateLimit("api", 1, 300.0))
    ctx.step.sleep("nap", 1)  # the next delivery replays "call"
    return value


def test_a_callable_key_limits_each_customer_apart(backend):
    ann, bob, ann_again = (
        backend.start("contract.rate-per-customer", {"customer": customer, "tag": tag})
        for customer, tag in (("ann", "a1"), ("bob", "b1"), ("ann", "a2"))
    )
    for execution_id in (ann, bob, ann_again):
        backend.deliver(execution_id)

    assert backend.get(ann).result == "a1" and backend.get(bob).result == "b1"
    waiting = backend.get(ann_again)
    assert (waiting.status, waiting.waiting_for["key"]) == ("waiting", "api:ann")
    assert _record(backend, bob).meta["rate_limit"] == "api:bob"
    assert backend.admissions("api:ann") == [(ann, "call", 1, True), (ann_again, "call", 1, False)]


def test_an_older_waiting_request_is_admitted_before_a_newer_one(backend):
    first, second = _start(backend, "a", limit=1), _start(backend, "b", limit=1)
    backend.deliver(first)
    backend.deliver(second)  # refused: waits until the unit frees
    backend.advance(10.5)  # the unit is free, but "b" was not delivered yet

    third = _start(backend, "c", limit=1)
    backend.deliver(third)
    assert backend.get(third).waiting_for["kind"] == "rate_limit"  # "b" asked first
    backend.deliver(second)
    assert backend.get(second).result == "b"
    assert calls == ["a", "b"]
    assert backend.get(third).wake_at > backend.now() + timedelta(seconds=9)


def test_a_cancelled_waiting_request_stops_holding_its_place(backend):
    first, second = _start(backend, "a", limit=1), _start(backend, "b", limit=1)
    backend.deliver(first)
    backend.deliver(second)
    backend.cancel(second)
    backend.run(second)
    assert backend.get(second).status == "cancelled"
    backend.advance(10.5)

    third = _start(backend, "c", limit=1)
    backend.deliver(third)

    assert backend.get(third).result == "c"
    # Its request, never admitted, is the prune's to delete whatever the age asked for, and so is
    # the first run's admission, out of its window: the third's, in it, stays.
    backend.engine.prune(timedelta(days=1))
    assert backend.admissions("api") == [(third, "call", 1, True)]


def test_units_of_a_step_on_a_queue_are_taken_once_before_it_is_sent(backend):
    execution_id = _start(backend, "a", body="flaky", limit=1, window=300.0, queue="bodies")
    backend.deliver(execution_id)
    assert backend.get(execution_id).waiting_for["kind"] == "task"
    assert backend.admissions("api") == [(execution_id, "call", 1, True)]

    backend.run(execution_id)  # the item fails once, is retried durably, then completes

    assert backend.get(execution_id).result == "a"
    assert calls == ["a", "a"]
    assert backend.admissions("api") == [(execution_id, "call", 1, True)]
    assert "admitted_at" in _record(backend, execution_id).meta
    other = _start(backend, "b", limit=1, window=300.0, queue="bodies")
    backend.deliver(other)
    assert backend.get(other).waiting_for["kind"] == "rate_limit"
    assert calls == ["a", "a"]


def test_an_admission_outlives_its_pruned_execution_until_its_window_ends(backend):
    first = _start(backend, "a", limit=1, window=60.0)
    backend.deliver(first)
    backend.advance(1)
    assert backend.engine.prune(timedelta(0)) >= 1  # this run, and what earlier tests left finished
    assert backend.storage.get_execution(first) is None
    assert backend.admissions("api") == [(None, "call", 1, True)]

    second = _start(backend, "b", limit=1, window=60.0)
    backend.deliver(second)
    assert backend.get(second).waiting_for["kind"] == "rate_limit"  # the pruned run's unit still counts

    backend.advance(60)
    backend.engine.prune(timedelta(days=1))
    assert backend.admissions("api") == [(second, "call", 1, False)]  # the spent one went
    backend.deliver(second)
    assert backend.get(second).result == "b"


@pytest.mark.parametrize("bad", list(BAD_KEYS))
def test_a_key_that_is_not_a_non_empty_string_is_refused_with_a_code(backend, bad):
    execution_id = backend.start("contract.rate-bad-key", {"bad": bad})
    backend.deliver(execution_id)

    result = backend.get(execution_id).result
    assert result["caught"] == "INVALID_RATE_LIMIT"
    assert "rate limit" in result["message"]
    assert backend.records(execution_id) == []
    assert calls == []


def test_a_rate_limit_that_is_not_a_rate_limit_is_refused(backend):
    execution_id = backend.start("contract.rate-not-an-option")
    backend.deliver(execution_id)

    assert "needs a durableflow.RateLimit" in backend.get(execution_id).result["caught"]
    assert calls == []


def test_an_admission_is_fenced_by_the_lease(backend):
    execution_id = _start(backend, "a")
    backend.deliver(execution_id)

    assert backend.storage.admit("api", 5, 10.0, 1, execution_id, "other", "not-the-token") is None
    assert backend.admissions("api") == [(execution_id, "call", 1, True)]


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: RateLimit("", 1, 1), "key must be a non-empty string"),
        (lambda: RateLimit(7, 1, 1), "key must be a non-empty string"),
        (lambda: RateLimit("k", 1.5, 1), "limit must be at least 1"),
        (lambda: RateLimit("k", True, 1), "limit must be at least 1"),
        (lambda: RateLimit("k", 1, 0), "window must be positive"),
        (lambda: RateLimit("k", 1, float("nan")), "window must be positive"),
        (lambda: RateLimit("k", 1, "1"), "window must be a number"),
        (lambda: RateLimit("k", 2, 1, units=0), "units must be between 1 and limit"),
        (lambda: RateLimit("k" * 201, 1, 1), "at most 200 characters"),
    ],
)
def test_a_rate_limit_is_refused_at_definition(make, message):
    with pytest.raises(ValueError, match=message):
        make()


T0 = ManualClock()()  # any aware moment


def _at(seconds):
    return T0 + timedelta(seconds=seconds)


@pytest.mark.parametrize(
    ("admitted", "ahead", "units", "expected"),
    [
        ([], [], 1, 0),  # room: now
        ([(-1, 1)], [], 1, 0),
        ([(-9, 1), (-5, 1)], [], 1, 1),  # full: when the oldest leaves (-9 + 10)
        ([(-9, 2)], [], 1, 1),
        ([(-9, 1), (-5, 1)], [], 2, 5),  # two units: both must leave
        ([], [1, 1], 1, 10),  # two older requests take the room first, now; this one after -> 0 + 10
        ([(-9, 1)], [1], 1, 1),  # the older request takes the free unit now, this one the next one
    ],
)
def test_the_admission_time_places_older_requests_first(admitted, ahead, units, expected):
    found = admission_time(T0, [(_at(t), n) for t, n in admitted], ahead, units, limit=2, window=10.0)
    assert found == _at(expected)
    # The storages' shortcut from sums agrees: it fits now exactly when nothing must leave first.
    assert fits_now(sum(n for _, n in admitted), sum(ahead), units, limit=2) == (expected == 0)


def test_a_request_refused_again_keeps_its_place_behind_an_older_one(backend):
    first, second, third = (_start(backend, tag, limit=1) for tag in "abc")
    for execution_id in (first, second, third):
        backend.deliver(execution_id)  # "a" admitted; "b" waits until +10, "c" until +20
    assert backend.get(third).wake_at - backend.get(second).wake_at == timedelta(seconds=10)
    backend.advance(20.5)  # both due; "c" asks again before "b" does

    backend.deliver(third)
    assert backend.get(third).waiting_for["kind"] == "rate_limit"  # "b" still goes first
    assert backend.get(third).wake_at > backend.now() + timedelta(seconds=9)
    backend.deliver(second)
    assert backend.get(second).result == "b"
    assert [admitted for *_, admitted in backend.admissions("api")] == [True, True, False]


def always_fails(tag):
    calls.append(tag)
    raise LookupError("the service is gone")


BODIES["fails"] = always_fails


def test_a_retried_run_runs_the_failed_step_again_under_its_first_admission(backend):
    execution_id = _start(backend, "a", body="fails", limit=1, window=300.0)
    backend.deliver(execution_id)
    assert backend.get(execution_id).status == "failed"
    assert "admitted_at" in _record(backend, execution_id).meta

    backend.retry(execution_id)
    backend.deliver(execution_id)

    assert backend.get(execution_id).status == "failed"
    assert calls == ["a", "a"]
    assert backend.admissions("api") == [(execution_id, "call", 1, True)]
