"""Effects (SPEC §5), held against both storages: in memory and the ORM (SQLite or PostgreSQL).

Deliveries run in this process under the test's control, against a fake external service
(``FakeService``) that counts its calls, keeps its own record of the work it did, and can be
told to fail before or after doing it.
"""

from __future__ import annotations

import logging
from datetime import timedelta

import pytest

import durableflow
from durableflow import EffectDeliveryError, WorkflowEffectError
from durableflow.engine import effects
from durableflow.engine.effects import EffectStatus, effect_request
from durableflow.testing import WorkflowTester
from tests.harness import LEASE_SECONDS


class Crash(BaseException):
    """The worker dies here (as a SIGKILL would): nothing after it runs in this delivery."""


class FakeService:
    """An external payment service: not idempotent, so every perform that gets through charges."""

    def __init__(self) -> None:
        self.charges: dict[str, list[dict]] = {}
        self.calls: list[tuple[str, str]] = []
        self.script: dict[tuple[str, str], list[str]] = {}
        self.hook = None  # called inside perform, after the work (a test's "meanwhile")

    def will(self, call: str, effect_id: str, *actions: str) -> None:
        self.script.setdefault((call, effect_id), []).extend(actions)

    def _next(self, call: str, effect_id: str) -> str | None:
        self.calls.append((call, effect_id))
        actions = self.script.get((call, effect_id))
        return actions.pop(0) if actions else None

    def performs(self, effect_id: str | None = None) -> int:
        return sum(len(v) for k, v in self.charges.items() if effect_id in (None, k))

    def count(self, call: str) -> int:
        return sum(1 for c, _ in self.calls if c == call)

    def perform(self, effect_id: str):
        action = self._next("perform", effect_id)
        if action == "raise-before":
            raise ConnectionError("connection refused")
        charge = {"charge": f"ch-{self.performs() + 1}", "effect": effect_id}
        self.charges.setdefault(effect_id, []).append(charge)
        if self.hook is not None:
            self.hook()
        if action == "raise-after":
            raise TimeoutError("the charge went through but the reply was lost")
        if action == "crash-after":
            raise Crash()
        if action == "bad-result":
            return {"charge": {1, 2}}
        return charge

    def lookup(self, effect_id: str):
        action = self._next("lookup", effect_id)
        if action == "unknown":
            return {"status": "unknown"}
        if action == "raise":
            raise ConnectionError("lookup unavailable")
        if action == "malformed":
            return {"state": "done"}
        if action == "bad-result":
            return {"status": "settled", "result": float("nan")}
        if effect_id in self.charges:
            return {"status": "settled", "result": self.charges[effect_id][0]}
        return {"status": "not-found"}


service = FakeService()
thief: dict[str, object] = {}


@pytest.fixture(autouse=True)
def _fresh_service():
    global service
    service = FakeService()
    thief.clear()
    yield


def charge(ctx, params, key="charge"):
    return ctx.step.effect(
        key,
        effect_id=params["effect_id"],
        operation=params.get("operation", "payments.charge/v1"),
        input=params.get("input", {"cents": 100}),
        retry_in=params.get("retry_in", 30),
        lookup=lambda effect_id: service.lookup(effect_id),
        perform=lambda effect_id: service.perform(effect_id),
    )


@durableflow.workflow("contract.effect")
def effect_wf(ctx, params):
    if "steal" in thief:
        thief["steal"](ctx)
    receipt = charge(ctx, params)
    return {"receipt": receipt, "after": ctx.step.run("after", lambda: "after")}


@durableflow.workflow("contract.effect-replay")
def effect_replay_wf(ctx, params):
    receipt = charge(ctx, params)
    ctx.step.sleep("nap", 5)
    return receipt


@durableflow.workflow("contract.effect-catch")
def effect_catch_wf(ctx, params):
    try:
        return {"receipt": charge(ctx, params)}
    except Exception as exc:  # noqa: BLE001 - a workflow that tries to swallow everything
        return {"caught": getattr(exc, "code", type(exc).__name__)}


def effect_of(backend, effect_id: str):
    return backend.engine.get_effect(effect_id)


def record_of(backend, execution_id: str, key: str = "charge"):
    return {r.key: r for r in backend.records(execution_id)}[key]


# perform, settle, replay ---------------------------------------------------------------------


def test_perform_settles_the_effect_and_the_step_returns_its_result(backend):
    execution_id = backend.start("contract.effect", {"effect_id": "pay-1"})

    backend.deliver(execution_id)

    execution = backend.get(execution_id)
    assert execution.status == "completed"
    assert execution.result == {"receipt": {"charge": "ch-1", "effect": "pay-1"}, "after": "after"}
    assert service.calls == [("perform", "pay-1")]
    effect = effect_of(backend, "pay-1")
    assert (effect.status, effect.result, effect.operation, effect.input) == (
        "settled",
        {"charge": "ch-1", "effect": "pay-1"},
        "payments.charge/v1",
        {"cents": 100},
    )
    assert (effect.began_by, effect.began_step, effect.settled_by, effect.attempts) == (
        execution_id,
        "charge",
        execution_id,
        1,
    )
    assert effect.holder_token is None
    record = record_of(backend, execution_id)
    assert (record.kind, record.status, record.attempts, record.value) == ("effect", "completed", 1, effect.result)
    assert record.meta == {"effect_id": "pay-1", "settled": "performed"}


def test_a_replay_performs_nothing(backend):
    execution_id = backend.start("contract.effect-replay", {"effect_id": "pay-2"})

    assert backend.deliver(execution_id) == "suspended"
    backend.advance(5.5)
    backend.deliver(execution_id)

    assert backend.get(execution_id).status == "completed"
    assert backend.get(execution_id).result == {"charge": "ch-1", "effect": "pay-2"}
    assert service.calls == [("perform", "pay-2")]


# uncertain outcomes ---------------------------------------------------------------------------


def test_perform_that_raises_after_the_work_parks_and_a_lookup_settles_it(backend):
    service.will("perform", "pay-3", "raise-after")
    execution_id = backend.start("contract.effect", {"effect_id": "pay-3", "retry_in": 30})

    assert backend.deliver(execution_id) == "suspended"
    execution = backend.get(execution_id)
    assert execution.status == "waiting"
    assert execution.waiting_for["kind"] == "effect"
    assert execution.waiting_for["effect_id"] == "pay-3"
    assert 29 <= (execution.wake_at - backend.now()).total_seconds() <= 30.5
    record = record_of(backend, execution_id)
    assert (record.status, record.attempts, record.error["type"]) == ("waiting", 1, "builtins.TimeoutError")
    assert effect_of(backend, "pay-3").status == "pending"
    assert effect_of(backend, "pay-3").holder_token is None  # given up while parked

    assert backend.deliver(execution_id) == "skipped"  # not due: no lookup before retry_in
    backend.advance(30.5)
    backend.deliver(execution_id)

    execution = backend.get(execution_id)
    assert execution.status == "completed"
    assert execution.result["receipt"] == {"charge": "ch-1", "effect": "pay-3"}
    assert service.calls == [("perform", "pay-3"), ("lookup", "pay-3")]
    assert service.performs() == 1
    assert record_of(backend, execution_id).meta["settled"] == "looked up"
    assert effect_of(backend, "pay-3").attempts == 2


def test_lookup_not_found_performs(backend):
    service.will("perform", "pay-4", "raise-before")
    execution_id = backend.start("contract.effect", {"effect_id": "pay-4", "retry_in": 10})

    execution = backend.run(execution_id)

    assert execution.status == "completed"
    assert service.calls == [("perform", "pay-4"), ("lookup", "pay-4"), ("perform", "pay-4")]
    assert service.performs() == 1
    assert execution.result["receipt"] == {"charge": "ch-1", "effect": "pay-4"}


def test_lookup_unknown_waits_retry_in_and_looks_up_again(backend):
    service.will("perform", "pay-5", "raise-after")
    service.will("lookup", "pay-5", "unknown", "raise")
    execution_id = backend.start("contract.effect", {"effect_id": "pay-5", "retry_in": 20})

    backend.deliver(execution_id)
    for expected_lookups in (1, 2):
        backend.advance(20.5)
        assert backend.deliver(execution_id) == "suspended"
        assert service.count("lookup") == expected_lookups
        assert backend.get(execution_id).status == "waiting"
        backend.advance(10)
        assert backend.deliver(execution_id) == "skipped"  # retry_in has not passed since
    backend.advance(10.5)
    backend.deliver(execution_id)

    assert backend.get(execution_id).status == "completed"
    assert service.calls == [("perform", "pay-5")] + [("lookup", "pay-5")] * 3
    assert service.performs() == 1
    reasons = record_of(backend, execution_id)
    assert reasons.attempts == 4


def test_a_crash_inside_perform_is_settled_by_lookup_after_recovery(backend):
    service.will("perform", "pay-6", "crash-after")
    execution_id = backend.start("contract.effect", {"effect_id": "pay-6", "retry_in": 5})

    with pytest.raises(Crash):
        backend.deliver(execution_id)
    assert backend.get(execution_id).status == "running"  # its lease is still live
    assert backend.deliver(execution_id) == "skipped"
    backend.advance(LEASE_SECONDS + 1)
    backend.deliver(execution_id)

    assert backend.get(execution_id).status == "completed"
    assert service.calls == [("perform", "pay-6"), ("lookup", "pay-6")]
    assert service.performs() == 1


# several executions, one effect id ------------------------------------------------------------


def test_two_executions_with_one_effect_id_get_one_perform_and_the_same_result(backend):
    first = backend.start("contract.effect", {"effect_id": "pay-7"})
    second = backend.start("contract.effect", {"effect_id": "pay-7"})

    backend.deliver(first)
    backend.deliver(second)

    results = [backend.get(pk).result["receipt"] for pk in (first, second)]
    assert results[0] == results[1] == {"charge": "ch-1", "effect": "pay-7"}
    assert service.calls == [("perform", "pay-7")]
    assert record_of(backend, second).meta["settled"] == "reused"
    assert record_of(backend, second).attempts == 0


def test_an_execution_arriving_mid_call_watches_and_is_woken_by_the_settle(backend):
    first = backend.start("contract.effect", {"effect_id": "pay-8", "retry_in": 600})
    second = backend.start("contract.effect", {"effect_id": "pay-8", "retry_in": 600})
    outcomes = []
    service.hook = lambda: outcomes.append(backend.deliver(second))  # arrives while "first" is inside perform

    backend.deliver(first)

    assert outcomes == ["suspended"]
    assert service.calls == [("perform", "pay-8")]  # the second one neither looked up nor performed
    woken = backend.get(second)
    assert woken.status == "pending"  # woken by the settle, long before its retry_in
    backend.deliver(second)
    assert backend.get(second).status == "completed"
    assert backend.get(second).result == backend.get(first).result
    assert service.calls == [("perform", "pay-8")]
    assert backend.engine.storage.pop_effect_watches("pay-8") == []


def test_a_settle_that_lands_while_an_execution_parks_is_not_lost(backend, monkeypatch):
    first = backend.start("contract.effect", {"effect_id": "pay-21", "retry_in": 600})
    second = backend.start("contract.effect", {"effect_id": "pay-21", "retry_in": 600})
    engine, outcomes = backend.engine, []
    watch = engine.watch_effect

    def settled_meanwhile(effect_id, *args):
        # The first execution settles between the second's decision to park and its park.
        engine.settle_effect(effect_id, service.charges[effect_id][0], first)
        return watch(effect_id, *args)

    def meanwhile():
        # On the class: the delivery runs the verbs on its own guard of the storage.
        original = type(engine).watch_effect
        monkeypatch.setattr(type(engine), "watch_effect", lambda _, *args: settled_meanwhile(*args))
        outcomes.append(backend.deliver(second))
        monkeypatch.setattr(type(engine), "watch_effect", original)

    service.hook = meanwhile

    backend.deliver(first)

    assert outcomes == ["requeued"]  # not parked for 600 s: delivered again at once
    assert backend.get(second).status == "pending"
    backend.deliver(second)
    assert backend.get(second).result == backend.get(first).result
    assert service.calls == [("perform", "pay-21")]


def test_a_parked_effect_is_looked_up_by_the_next_execution_that_asks(backend):
    service.will("perform", "pay-9", "raise-after")
    first = backend.start("contract.effect", {"effect_id": "pay-9", "retry_in": 600})
    second = backend.start("contract.effect", {"effect_id": "pay-9", "retry_in": 600})

    backend.deliver(first)  # uncertain: parked, the effect given up
    backend.deliver(second)  # nobody is mid-call: it looks up, settles, wakes the first

    assert backend.get(second).status == "completed"
    assert backend.get(first).status == "pending"
    backend.deliver(first)
    assert backend.get(first).result == backend.get(second).result
    assert service.calls == [("perform", "pay-9"), ("lookup", "pay-9")]


def test_a_holder_whose_lease_expired_no_longer_holds_the_effect(backend):
    a = backend.start("contract.effect", {"effect_id": "pay-10"})
    b = backend.start("contract.effect", {"effect_id": "pay-10"})
    request = effect_request("pay-10", "payments.charge/v1", {"cents": 100}, 1, service.lookup, service.perform)
    engine = backend.engine
    ja, jb = backend.journal(a), backend.journal(b)
    ja.claim()
    jb.claim()
    assert engine.begin_effect(request, a, "charge").status == effects.NEW
    assert engine.begin_effect(request, b, "charge").status == effects.PENDING

    assert engine.hold_effect("pay-10", a, ja.token) == (effects.HELD, None)
    assert engine.hold_effect("pay-10", a, ja.token) == (effects.HELD, None)  # again, before a perform
    assert engine.hold_effect("pay-10", b, jb.token) == (effects.BUSY, None)
    backend.advance(LEASE_SECONDS + 1)
    jb2 = backend.journal(b)
    assert jb2.claim() is not None
    assert engine.hold_effect("pay-10", b, jb2.token) == (effects.HELD, None)
    assert engine.hold_effect("pay-10", a, ja.token)[0] == effects.BUSY  # a's lease has expired
    assert effect_of(backend, "pay-10").attempts == 3
    assert effect_of(backend, "pay-10").holder_id == b


# the lease -------------------------------------------------------------------------------------


@pytest.mark.parametrize("pending", [False, True], ids=["new", "pending"])
def test_a_delivery_that_lost_its_lease_calls_neither_lookup_nor_perform(backend, pending):
    if pending:
        service.will("perform", "pay-11", "raise-after")
        backend.deliver(backend.start("contract.effect", {"effect_id": "pay-11", "retry_in": 600}))
    calls = list(service.calls)
    execution_id = backend.start("contract.effect", {"effect_id": "pay-11"})
    # Another delivery takes the lease between the claim and the effect: only the database
    # knows (this delivery's heartbeat has not noticed).
    thief["steal"] = lambda ctx: backend.storage.update_execution(ctx.execution_id, {"lease_token": "another"})

    assert backend.deliver(execution_id) == "lease-lost"

    assert service.calls == calls
    assert effect_of(backend, "pay-11").status == "pending"
    assert backend.records(execution_id) == []


# mismatches and invalid descriptors --------------------------------------------------------------


@durableflow.workflow("contract.effect-invalid")
def invalid_wf(ctx, params):
    descriptor = {
        "effect_id": "pay-14",
        "operation": "payments.charge/v1",
        "input": {"cents": 1},
        "retry_in": 1,
        "lookup": service.lookup,
        "perform": service.perform,
        **thief["change"],
    }
    try:
        ctx.step.effect("charge", **descriptor)
    except WorkflowEffectError as exc:
        return {"code": exc.code, "message": exc.message}


@pytest.mark.parametrize(
    "change", [{"input": {"cents": 200}}, {"operation": "payments.refund/v1"}], ids=["input", "operation"]
)
def test_a_known_effect_id_with_another_request_is_a_mismatch(backend, change):
    first = backend.start("contract.effect-catch", {"effect_id": "pay-12"})
    second = backend.start("contract.effect-catch", {"effect_id": "pay-12", **change})

    backend.deliver(first)
    backend.deliver(second)

    assert backend.get(second).result == {"caught": "EFFECT_REQUEST_MISMATCH"}
    record = record_of(backend, second)
    assert (record.status, record.error["code"]) == ("failed", "EFFECT_REQUEST_MISMATCH")
    assert "pay-12" in record.error["message"]
    assert service.calls == [("perform", "pay-12")]


def test_the_same_input_in_another_key_order_is_the_same_request(backend):
    first = backend.start("contract.effect", {"effect_id": "pay-13", "input": {"a": 1, "b": [1.5, None]}})
    second = backend.start("contract.effect", {"effect_id": "pay-13", "input": {"b": [1.5, None], "a": 1}})

    backend.deliver(first)
    backend.deliver(second)

    assert backend.get(second).status == "completed"
    assert service.count("perform") == 1


@pytest.mark.parametrize(
    "change, problem",
    [
        ({"effect_id": ""}, "effect_id"),
        ({"effect_id": "x" * 256}, "effect_id"),
        ({"operation": ""}, "operation"),
        ({"retry_in": -1}, "retry_in"),
        ({"retry_in": float("inf")}, "retry_in"),
        ({"retry_in": True}, "retry_in"),
        ({"lookup": "not callable"}, "lookup"),
        ({"perform": None}, "perform"),
        ({"input": {"when": {1, 2}}}, "input"),
    ],
)
def test_an_invalid_descriptor_is_recorded_at_the_step(backend, change, problem):
    thief["change"] = change
    execution_id = backend.start("contract.effect-invalid")
    backend.deliver(execution_id)

    result = backend.get(execution_id).result
    assert result["code"] == "INVALID_EFFECT_REQUEST"
    assert problem in result["message"]
    record = record_of(backend, execution_id)
    assert (record.kind, record.status, record.error["code"]) == ("effect", "failed", "INVALID_EFFECT_REQUEST")
    assert service.calls == []
    assert effect_of(backend, "pay-14") is None


def test_an_invalid_descriptor_fails_the_run_where_it_is_not_caught(backend):
    execution_id = backend.start("contract.effect", {"effect_id": "pay-15", "retry_in": -5})

    backend.deliver(execution_id)

    execution = backend.get(execution_id)
    assert execution.status == "failed"
    assert (execution.error["code"], execution.error["step"]) == ("INVALID_EFFECT_REQUEST", "charge")


# answers the protocol does not allow ---------------------------------------------------------------


@pytest.mark.parametrize(
    "call, action, code",
    [
        ("lookup", "malformed", "INVALID_EFFECT_LOOKUP"),
        ("lookup", "bad-result", "INVALID_EFFECT_RESULT"),
        ("perform", "bad-result", "INVALID_EFFECT_RESULT"),
    ],
)
def test_a_malformed_answer_fails_the_run_and_retry_resumes_once_fixed(backend, call, action, code):
    if call == "lookup":
        service.will("perform", "pay-16", "raise-after")
    service.will(call, "pay-16", action)
    execution_id = backend.start("contract.effect-catch", {"effect_id": "pay-16", "retry_in": 5})

    execution = backend.run(execution_id)

    # The workflow catches every Exception, and still the run fails at the effect step.
    assert execution.status == "failed"
    assert (execution.error["code"], execution.error["step"]) == (code, "charge")
    assert execution.error["type"] == "durableflow.exceptions.EffectDeliveryError"
    assert "pay-16" in execution.error["message"]
    record = record_of(backend, execution_id)
    assert (record.status, record.value, record.error["code"]) == ("failed", None, code)
    assert effect_of(backend, "pay-16").status == "pending"  # nothing was settled

    backend.retry(execution_id)  # the script is used up: the answers are well-formed now
    execution = backend.run(execution_id)

    assert execution.status == "completed"
    assert execution.result == {"receipt": {"charge": "ch-1", "effect": "pay-16"}}
    assert service.performs() == 1
    assert service.calls[-1] == ("lookup", "pay-16")


def test_an_effect_delivery_error_names_its_code():
    error = EffectDeliveryError("INVALID_EFFECT_LOOKUP", "bad")
    assert str(error) == "INVALID_EFFECT_LOOKUP: bad"


# settle and watch -------------------------------------------------------------------------------


def test_a_settle_that_finds_another_result_keeps_the_first_and_logs_the_conflict(backend, caplog):
    request = effect_request("pay-17", "op/v1", None, 1, service.lookup, service.perform)
    backend.engine.begin_effect(request, "someone", "charge")

    assert backend.engine.settle_effect("pay-17", {"n": 1}, "someone") == {"n": 1}
    with caplog.at_level(logging.WARNING, logger="durableflow.effects"):
        assert backend.engine.settle_effect("pay-17", {"n": 2}, "another") == {"n": 1}
        assert backend.engine.settle_effect("pay-17", {"n": 1}, "another") == {"n": 1}

    assert effect_of(backend, "pay-17").result == {"n": 1}
    conflicts = [r for r in caplog.records if "different result" in r.getMessage()]
    assert len(conflicts) == 1
    assert '{"n":2}' in conflicts[0].getMessage() and "another" in conflicts[0].getMessage()


def test_a_watch_is_refused_once_the_effect_is_settled(backend):
    request = effect_request("pay-18", "op/v1", None, 1, service.lookup, service.perform)
    execution_id = backend.start("contract.effect", {"effect_id": "other"})
    backend.engine.begin_effect(request, execution_id, "charge")

    assert backend.engine.watch_effect("pay-18", execution_id, "charge", "token") is True
    assert backend.engine.watch_effect("pay-18", execution_id, "charge", "token") is True  # a repeat
    backend.engine.settle_effect("pay-18", 1, "someone")
    assert backend.engine.watch_effect("pay-18", execution_id, "charge", "token") is False
    assert backend.engine.storage.pop_effect_watches("pay-18") == []


def test_a_park_whose_effect_settled_meanwhile_replays_at_once(backend):
    from durableflow.engine.records import Requeued, Suspended

    execution_id = backend.start("contract.effect", {"effect_id": "pay-19"})
    journal = backend.journal(execution_id)
    journal.claim()
    until = backend.now() + timedelta(seconds=600)

    recorded = journal.finish(Suspended(until, {"kind": "effect"}, guard=lambda: False))
    journal.close()

    assert recorded == Requeued("woken while parking")
    execution = backend.get(execution_id)
    assert (execution.status, execution.wake_at, execution.waiting_for) == ("pending", None, None)


# the tester ---------------------------------------------------------------------------------------


def test_the_workflow_tester_runs_effects_through_uncertain_outcomes():
    service.will("perform", "pay-20", "raise-after")
    service.will("lookup", "pay-20", "unknown")
    tester = WorkflowTester()
    execution = tester.start("contract.effect", {"effect_id": "pay-20", "retry_in": 60})

    result = tester.run_until_finished(execution.id)

    assert result["receipt"] == {"charge": "ch-1", "effect": "pay-20"}
    assert service.performs() == 1
    assert tester.storage.get_effect("pay-20").status == EffectStatus.SETTLED
