"""``start_many``, held against both storages: order, idempotency, validation before any write,
and deliveries sent only once the transaction commits."""

from __future__ import annotations

import contextlib

import pytest

import durableflow
from durableflow import WorkflowStartError, dispatch
from durableflow.dispatch import DELIVER
from tests.harness import MemoryHarness


@pytest.fixture
def written(backend):
    """``written()``: the ids of the executions this test wrote (live tests leave theirs behind)."""
    before = set(backend.storage.execution_ids())
    return lambda: sorted(set(backend.storage.execution_ids()) - before)


@pytest.fixture
def sent(backend, request, monkeypatch):
    """``(capture, sent)``: verbs run inside ``capture()`` send their messages (the ORM's on
    commit); ``sent()`` lists the ids of the deliveries sent, in order."""
    if isinstance(backend, MemoryHarness):
        outbox = backend.storage.outbox
        return contextlib.nullcontext, lambda: [args[0] for task, args, _ in outbox if task == DELIVER]
    messages: list[tuple[str, tuple]] = []
    monkeypatch.setattr(dispatch, "publish", lambda message: messages.append((message.task, message.args)) or True)
    monkeypatch.setattr(
        dispatch,
        "send_many",
        lambda task, args_list, queue: messages.extend((task, tuple(a)) for a in args_list) or True,
    )
    capture = request.getfixturevalue("django_capture_on_commit_callbacks")
    return (lambda: capture(execute=True)), lambda: [args[0] for task, args in messages if task == DELIVER]


@durableflow.workflow("cs.echo")
def echo(ctx, params):
    return ctx.step.run("echo", lambda: params)


def start_many(backend, params_list, keys=None, **options):
    return backend.engine.start_many("cs.echo", params_list, keys, **options)


def test_start_many_returns_new_executions_in_order_and_sends_one_delivery_each(backend, sent, written):
    capture, deliveries = sent
    # 130: more than one INSERT on SQLite, whose statements take at most 999 parameters.
    params = [{"n": n} for n in range(130)]
    with capture():
        executions = start_many(backend, params, queue="cs-queue")

    assert [e.params for e in executions] == params
    assert len({e.id for e in executions}) == 130
    assert {(e.status, e.queue, e.workflow) for e in executions} == {("pending", "cs-queue", "cs.echo")}
    assert all(e.root_id == e.id and e.created_at is not None for e in executions)
    assert deliveries() == [e.id for e in executions]
    assert written() == sorted(e.id for e in executions)
    assert backend.run(executions[7].id).result == {"n": 7}


def test_start_many_of_nothing_writes_and_sends_nothing(backend, sent, written):
    capture, deliveries = sent
    with capture():
        assert start_many(backend, []) == []
    assert deliveries() == [] and written() == []


def test_a_repeated_key_returns_the_first_execution_at_its_position(backend, sent, written):
    capture, deliveries = sent
    with capture():
        first = backend.engine.start("cs.echo", {"n": 1}, idempotency_key="k1")[0]
        executions = start_many(backend, [{"n": 0}, {"n": 1}, {"n": 2}], ["k0", "k1", "k2"])
        again = start_many(backend, [{"n": 0}, {"n": 1}, {"n": 2}], ["k0", "k1", "k2"])

    assert executions[1].id == first.id
    assert [e.id for e in again] == [e.id for e in executions]
    assert deliveries() == [first.id, executions[0].id, executions[2].id]  # the repeats sent nothing
    assert len(written()) == 3


def test_a_key_twice_in_the_list_with_the_same_params_names_one_execution(backend, sent, written):
    capture, deliveries = sent
    with capture():
        executions = start_many(backend, [{"n": 1}, {"n": 2}, {"n": 1}], ["same", None, "same"])

    assert executions[0].id == executions[2].id != executions[1].id
    assert deliveries() == [executions[0].id, executions[1].id]
    assert len(written()) == 2


@pytest.mark.parametrize(
    ("keys", "params"),
    [
        (["new", "k1"], [{"n": 0}, {"n": 99}]),  # k1 started before with other params
        (["twice", "twice"], [{"n": 0}, {"n": 99}]),  # the same key twice in the list, other params
    ],
    ids=["taken-before", "twice-in-the-list"],
)
def test_a_conflicting_repeat_raises_and_writes_nothing(backend, sent, written, keys, params):
    capture, deliveries = sent
    with capture():
        first = backend.engine.start("cs.echo", {"n": 1}, idempotency_key="k1")[0]
    with capture(), pytest.raises(WorkflowStartError, match="other params") as raised:
        start_many(backend, params, keys)

    assert raised.value.code == "IDEMPOTENCY_CONFLICT"
    assert written() == [first.id]
    assert deliveries() == [first.id]


@pytest.mark.parametrize(
    ("params", "keys", "match"),
    [
        ([{"ok": 1}, {"ok": 2}, {"ok": 3}, {"bad": (1, 2)}], None, r"^INVALID_PARAMS: params\[3\]: .*/bad"),
        ([{"ok": 1}, {"ok": 2}], [None, ""], r"^INVALID_PARAMS: idempotency_keys\[1\] must be a non-empty string"),
        ([{"ok": 1}, {"ok": 2}], ["only-one"], r"1 idempotency keys for 2 params"),
    ],
    ids=["params", "key", "lengths"],
)
def test_invalid_input_names_its_position_and_writes_nothing(backend, sent, written, params, keys, match):
    capture, deliveries = sent
    with capture(), pytest.raises(WorkflowStartError, match=match) as raised:
        start_many(backend, params, keys)

    assert raised.value.code == "INVALID_PARAMS"
    assert written() == [] and deliveries() == []


def test_start_many_inside_a_rolled_back_transaction_starts_and_sends_nothing(backend, sent, written):
    capture, deliveries = sent
    with capture(), pytest.raises(RuntimeError), backend.storage.atomic():
        assert len(start_many(backend, [{"n": 1}, {"n": 2}], ["a", "b"])) == 2
        raise RuntimeError("the view failed")

    assert written() == [] and deliveries() == []
    # The keys were not taken: the same start now creates them.
    with capture():
        executions = start_many(backend, [{"n": 1}, {"n": 2}], ["a", "b"])
    assert deliveries() == [e.id for e in executions]


def test_a_repeated_start_inside_a_transaction_leaves_it_usable(backend, sent):
    capture, deliveries = sent
    with capture(), backend.storage.atomic():
        first, created = backend.engine.start("cs.echo", {"n": 1}, idempotency_key="k")
        again, repeated = backend.engine.start("cs.echo", {"n": 1}, idempotency_key="k")
        (many,) = start_many(backend, [{"n": 1}], ["k"])
        other = backend.engine.start("cs.echo", {"n": 2})[0]  # the transaction goes on

    assert (created, repeated) == (True, False)
    assert first.id == again.id == many.id
    assert deliveries() == [first.id, other.id]
