"""Concurrency keys, held against both storages: at most ``limit`` runs of a key past their
start at once; the others wait ``pending`` (``waiting_for.kind == "concurrency"``), are
neither claimed nor re-sent, and are admitted in start order as holders end."""

from __future__ import annotations

import pytest

import durableflow
from durableflow import exceptions
from tests.harness import LEASE_SECONDS

ONE = durableflow.Concurrency(key="params.customer", limit=1)


@durableflow.workflow("contract.limited", concurrency=ONE)
def limited_wf(ctx, params):
    ctx.step.sleep("nap", 5)
    if params.get("fail"):
        raise ValueError("boom")
    if params.get("again"):
        ctx.continue_as_new({"customer": params["customer"]})
    return params.get("n")


@durableflow.workflow("contract.limited.two", concurrency=durableflow.Concurrency(key="params.customer", limit=2))
def limited_two_wf(ctx, params):
    ctx.step.sleep("nap", 5)
    return params.get("n")


@durableflow.workflow(
    "contract.limited.callable",
    concurrency=durableflow.Concurrency(key=lambda params: params.get("tenant") if params else None),
)
def limited_callable_wf(ctx, params):
    ctx.step.sleep("nap", 5)


def _queued(backend, execution_id):
    execution = backend.get(execution_id)
    return execution.status == "pending" and execution.concurrency_ticket is not None


def _start_holder(backend, workflow="contract.limited", **params):
    execution_id = backend.start(workflow, {"customer": "A", **params})
    assert backend.deliver(execution_id) == "suspended"
    return execution_id


def _finish(backend, execution_id):
    backend.advance(6)
    return backend.run(execution_id)


def test_runs_beyond_the_limit_wait_pending_and_are_not_claimed(backend):
    holder = _start_holder(backend)
    second = backend.start("contract.limited", {"customer": "A"})
    third = backend.start("contract.limited", {"customer": "A"})

    for position, execution_id in enumerate((second, third), start=1):
        execution = backend.get(execution_id)
        assert execution.status == "pending"
        assert execution.waiting_for == {"kind": "concurrency", "key": "A", "position": position}
        assert backend.deliver(execution_id) == "skipped"
    assert backend.get(holder).status == "waiting"  # a waiting holder keeps its slot


def test_another_key_is_not_held_up_and_a_key_of_none_is_not_limited(backend):
    _start_holder(backend)
    other = backend.start("contract.limited", {"customer": "B"})
    assert backend.deliver(other) == "suspended"
    free = [backend.start("contract.limited", {"n": n}) for n in range(2)]
    assert [backend.deliver(pk) for pk in free] == ["suspended", "suspended"]
    assert backend.get(free[0]).concurrency_key is None


def test_a_holder_that_ends_admits_the_next_in_start_order(backend):
    holder = _start_holder(backend)
    queued = [backend.start("contract.limited", {"customer": "A", "n": n}) for n in range(3)]

    assert _finish(backend, holder).status == "completed"
    assert not _queued(backend, queued[0])
    assert backend.get(queued[0]).waiting_for is None
    assert [_queued(backend, pk) for pk in queued[1:]] == [True, True]
    assert backend.deliver(queued[0]) == "suspended"
    assert _finish(backend, queued[0]).result == 0
    assert [_queued(backend, pk) for pk in queued[1:]] == [False, True]


def test_a_failed_or_cancelled_holder_frees_its_slot(backend):
    failing = _start_holder(backend, fail=True)
    waiting = [backend.start("contract.limited", {"customer": "A"}) for _ in range(2)]
    assert _finish(backend, failing).status == "failed"
    assert not _queued(backend, waiting[0])

    backend.cancel(waiting[0])
    assert backend.get(waiting[0]).status == "cancelled"
    assert not _queued(backend, waiting[1])


def test_a_cancelled_queued_run_leaves_the_queue_and_frees_nothing(backend):
    _start_holder(backend)
    first, second = (backend.start("contract.limited", {"customer": "A"}) for _ in range(2))
    backend.cancel(first)
    assert backend.get(first).status == "cancelled"
    assert _queued(backend, second)


def test_a_retried_failed_run_asks_for_a_slot_again(backend):
    failing = _start_holder(backend, fail=True)
    assert _finish(backend, failing).status == "failed"
    holder = _start_holder(backend)

    retried = backend.retry(failing)
    assert retried.status == "pending" and retried.concurrency_ticket is not None
    assert backend.deliver(failing) == "skipped"
    assert _finish(backend, holder).status == "completed"
    assert not _queued(backend, failing)


def test_continue_as_new_hands_the_slot_on(backend):
    holder = _start_holder(backend, again=True)
    queued = backend.start("contract.limited", {"customer": "A"})
    backend.advance(6)
    assert backend.deliver(holder) == "continued"

    carried = backend.get(holder).continued_as
    assert not _queued(backend, carried)
    assert _queued(backend, queued)
    assert backend.deliver(carried) == "suspended"
    assert _finish(backend, carried).status == "completed"
    assert not _queued(backend, queued)


def test_a_limit_of_two_and_a_callable_key(backend):
    two = [backend.start("contract.limited.two", {"customer": "A"}) for _ in range(3)]
    assert [_queued(backend, pk) for pk in two] == [False, False, True]
    tenants = [backend.start("contract.limited.callable", {"tenant": t}) for t in ("x", "x", "y")]
    assert [_queued(backend, pk) for pk in tenants] == [False, True, False]
    assert not _queued(backend, backend.start("contract.limited.callable", {}))


def test_start_many_queues_in_list_order(backend):
    runs = backend.engine.start_many("contract.limited", [{"customer": "A", "n": n} for n in range(3)])
    assert [_queued(backend, run.id) for run in runs] == [False, True, True]
    assert [backend.get(run.id).waiting_for["position"] for run in runs[1:]] == [1, 2]
    assert _finish(backend, runs[0].id).status == "completed"
    assert [_queued(backend, run.id) for run in runs] == [False, False, True]


def test_a_holder_whose_lease_expired_keeps_its_slot(backend):
    holder = backend.start("contract.limited", {"customer": "A"})
    assert backend.journal(holder).claim() is not None  # then its process dies
    queued = backend.start("contract.limited", {"customer": "A"})
    backend.advance(LEASE_SECONDS + 1)
    assert backend.sweep()["admitted"] == 0
    assert _queued(backend, queued)
    assert backend.deliver(queued) == "skipped"


def test_the_sweep_admits_into_slots_freed_another_way(backend):
    holder = _start_holder(backend)
    queued = backend.start("contract.limited", {"customer": "A"})
    backend.storage.update_execution(holder, {"status": "completed"})  # ended outside the verbs
    assert backend.sweep()["admitted"] == 1
    assert not _queued(backend, queued)
    assert backend.deliver(queued) == "suspended"


def test_a_repeated_start_takes_no_second_place(backend):
    _start_holder(backend)
    first = backend.start("contract.limited", {"customer": "A"}, idempotency_key="k")
    assert backend.start("contract.limited", {"customer": "A"}, idempotency_key="k") == first
    assert backend.storage.slots("contract.limited", "A") == (1, 1, 1)


@pytest.mark.parametrize(
    "params, message",
    [
        ({"customer": {"id": 1}}, "the workflow's concurrency key is a dict"),
        ({"customer": "x" * 256}, "1 to 255 characters long, not 256"),
        ({"customer": ""}, "1 to 255 characters long, not 0"),
    ],
)
def test_a_key_that_is_not_a_key_is_refused_and_nothing_is_written(backend, params, message):
    with pytest.raises(exceptions.WorkflowStartError) as caught:
        backend.start("contract.limited", params, execution_id="refused")
    assert caught.value.code == "INVALID_PARAMS"
    assert message in caught.value.message
    assert backend.storage.get_execution("refused") is None


def test_numbers_are_keys_too(backend):
    first = backend.start("contract.limited", {"customer": 7})
    assert backend.get(first).concurrency_key == "7"
    assert _queued(backend, backend.start("contract.limited", {"customer": 7}))


def test_a_bad_concurrency_option_is_refused_when_declared():
    with pytest.raises(ValueError, match="not a JMESPath expression"):
        durableflow.Concurrency(key="params.[")
    with pytest.raises(ValueError, match="limit must be an integer of at least 1"):
        durableflow.Concurrency(key="params.customer", limit=0)
    with pytest.raises(ValueError, match="a callable of the params"):
        durableflow.Concurrency(key=3)
