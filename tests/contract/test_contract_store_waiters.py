"""Store waiters (``when``/``take``), held against both storages: only a change to what a
selector read wakes it; ``take`` hands out each item once; no change is missed."""

from __future__ import annotations

import contextlib

import pytest

import durableflow
from durableflow import dispatch
from durableflow.dispatch import DELIVER
from durableflow.engine.records import Suspended
from durableflow.engine.store_types import StepRef
from tests.harness import MemoryHarness


@pytest.fixture
def wakeups(backend, request, monkeypatch):
    """``(capture, count)``: verbs run inside ``capture()`` send their messages (the ORM's are
    sent on commit); ``count(id)`` is how many deliveries of ``id`` were sent."""
    if isinstance(backend, MemoryHarness):
        outbox = backend.storage.outbox
        return contextlib.nullcontext, lambda pk: sum(1 for task, args, _ in outbox if (task, args) == (DELIVER, (pk,)))
    sent: list[tuple[str, tuple]] = []
    monkeypatch.setattr(dispatch, "publish", lambda message: sent.append((message.task, message.args)) or True)
    capture = request.getfixturevalue("django_capture_on_commit_callbacks")
    return (lambda: capture(execute=True)), lambda pk: sent.count((DELIVER, (pk,)))


Board = durableflow.define_store("cw-board", initial=lambda: {"ready": False, "other": 0, "items": []})


def set_key(name, value):
    def updater(draft):
        draft[name] = value

    return updater


@durableflow.workflow("cw.when-ready")
def when_ready(ctx, params):
    board = ctx.step.store(Board, id=params["id"])
    ready = board.when("ready", lambda state: state["ready"])
    return {"ready": ready, "after": ctx.step.run("after", lambda: "ran")}


def test_a_when_waiter_sleeps_through_changes_to_other_keys_and_wakes_on_its_own(backend, wakeups):
    capture, sent = wakeups
    execution_id = backend.start("cw.when-ready", {"id": "b1"})
    assert backend.deliver(execution_id) == "suspended"
    execution = backend.get(execution_id)
    assert execution.status == "waiting" and execution.waiting_for["kind"] == "store"
    (waiter,) = backend.waiters("cw-board", "b1")
    assert waiter.reads == [{"path": ["ready"], "read": "value"}] and waiter.version == 0
    before = sent(execution_id)

    for i in range(100):
        with capture():
            backend.engine.store_update(Board, "b1", set_key("other", i + 1))
    assert backend.get(execution_id).status == "waiting"
    assert sent(execution_id) == before
    assert backend.get(execution_id).deliveries == 1

    with capture():
        backend.engine.store_update(Board, "b1", set_key("ready", "yes"))
    assert backend.get(execution_id).status == "pending"
    assert sent(execution_id) == before + 1
    assert backend.deliver(execution_id) == "completed"
    assert backend.get(execution_id).result == {"ready": "yes", "after": "ran"}
    assert backend.waiters("cw-board", "b1") == []
    assert [(r.key, r.kind, r.status) for r in backend.records(execution_id)] == [
        ("ready", "store_when", "completed"),
        ("after", "run", "completed"),
    ]


def test_a_when_that_matches_at_once_does_not_wait(backend):
    backend.engine.store_update(Board, "b2", set_key("ready", True))
    execution_id = backend.start("cw.when-ready", {"id": "b2"})
    assert backend.deliver(execution_id) == "completed"
    assert backend.waiters("cw-board", "b2") == []


def test_a_change_that_leaves_the_selector_falsy_waits_again(backend):
    execution_id = backend.start("cw.when-ready", {"id": "b3"})
    backend.deliver(execution_id)
    backend.engine.store_update(Board, "b3", set_key("ready", 0))  # touched, still falsy
    assert backend.get(execution_id).status == "pending"
    assert backend.deliver(execution_id) == "suspended"
    (waiter,) = backend.waiters("cw-board", "b3")
    assert (waiter.version, waiter.woken_at) == (1, None)
    backend.engine.store_update(Board, "b3", set_key("ready", 1))
    assert backend.run(execution_id).status == "completed"


@durableflow.workflow("cw.take")
def take_wf(ctx, params):
    board = ctx.step.store(Board, id=params["id"])
    item = board.take(
        "claim",
        lambda state: state["items"][0] if state["items"] else None,
        lambda draft, selected: draft["items"].remove(selected),
    )
    return item


def test_take_gives_each_item_to_one_consumer_and_the_rest_wait_for_more(backend):
    backend.engine.store_update(Board, "queue", lambda draft: draft["items"].extend(["a", "b"]))
    consumers = [backend.start("cw.take", {"id": "queue"}) for _ in range(3)]
    for execution_id in consumers:
        backend.deliver(execution_id)

    results = {execution_id: backend.get(execution_id) for execution_id in consumers}
    claimed = sorted(e.result for e in results.values() if e.status == "completed")
    waiting = [pk for pk, e in results.items() if e.status == "waiting"]
    assert claimed == ["a", "b"] and len(waiting) == 1
    assert backend.engine.store_get(Board, "queue").state["items"] == []

    backend.engine.store_update(Board, "queue", lambda draft: draft["items"].append("c"))
    assert backend.run(waiting[0]).result == "c"
    assert backend.engine.store_get(Board, "queue").state["items"] == []
    assert sorted(key for _, key, _ in backend.ledger("cw-board", "queue")) == ["claim"] * 3


def test_a_take_claimed_before_its_journal_record_is_returned_on_replay(backend):
    backend.engine.store_update(Board, "t-gap", lambda draft: draft["items"].extend(["x", "y"]))
    execution_id = backend.start("cw.take", {"id": "t-gap"})
    crashed = backend.journal(execution_id)
    assert crashed.claim() is not None
    watched = backend.engine.store_watch(
        Board,
        "t-gap",
        lambda state: state["items"][0] if state["items"] else None,
        claim=lambda draft, selected: draft["items"].remove(selected),
        step=StepRef(execution_id, "claim", crashed.token, "store_take"),
    )
    crashed.close()
    backend.advance(61)

    assert backend.deliver(execution_id) == "completed"
    assert watched.value == backend.get(execution_id).result == "x"
    assert backend.engine.store_get(Board, "t-gap").state["items"] == ["y"]  # claimed once


def test_a_wake_that_comes_while_the_execution_still_runs_is_not_lost(backend):
    """The window between the waiter's commit and the delivery's outcome: the wake-up is kept on
    the execution's row (``Engine.wake``), so the delivery's suspension becomes a replay at once;
    the sweep has nothing left to do."""
    execution_id = backend.start("cw.when-ready", {"id": "race"})
    journal = backend.journal(execution_id)
    assert journal.claim() is not None
    step = StepRef(execution_id, "ready", journal.token, "store_when")
    assert not backend.engine.store_watch(Board, "race", lambda state: state["ready"], step=step).matched

    backend.engine.store_update(Board, "race", set_key("ready", True))  # the execution is running
    assert backend.get(execution_id).status == "running"
    assert type(journal.finish(Suspended(None, {"kind": "store", "step": "ready"}))).__name__ == "Requeued"
    journal.close()
    assert backend.get(execution_id).status == "pending"

    assert backend.sweep()["stores"] == 0
    assert backend.deliver(execution_id) == "completed"
    assert backend.sweep()["stores"] == 0


def test_deleting_a_store_wakes_every_waiter_and_they_see_a_new_instance(backend):
    execution_id = backend.start("cw.when-ready", {"id": "gone"})
    backend.deliver(execution_id)
    snapshot = backend.engine.store_get(Board, "gone")
    assert (
        backend.engine.store_delete(Board, "gone", expected=(snapshot.instance_id, snapshot.version))["status"]
        == "deleted"
    )
    assert backend.get(execution_id).status == "pending"
    assert backend.deliver(execution_id) == "suspended"  # the new instance is not ready either
    (waiter,) = backend.waiters("cw-board", "gone")
    assert waiter.instance_id != snapshot.instance_id


def test_woken_waiters_of_finished_executions_are_dropped_by_the_sweep(backend):
    execution_id = backend.start("cw.when-ready", {"id": "cancelled"})
    backend.deliver(execution_id)
    backend.cancel(execution_id)
    backend.engine.store_update(Board, "cancelled", set_key("ready", True))
    assert backend.get(execution_id).status == "cancelled"
    backend.sweep()
    assert backend.waiters("cw-board", "cancelled") == []


@durableflow.workflow("cw.paths")
def paths_wf(ctx, params):
    board = ctx.step.store(Board, id=params["id"])
    return board.when("first", lambda state: state["items"][0] if state["items"] else None)


def test_a_waiter_on_a_list_wakes_when_its_length_changes(backend):
    execution_id = backend.start("cw.paths", {"id": "list"})
    backend.deliver(execution_id)
    (waiter,) = backend.waiters("cw-board", "list")
    assert waiter.reads == [{"path": ["items"], "read": "shape"}]
    backend.engine.store_update(Board, "list", set_key("ready", True))
    assert backend.get(execution_id).status == "waiting"
    backend.engine.store_update(Board, "list", lambda draft: draft["items"].append({"job": 1}))
    assert backend.run(execution_id).result == {"job": 1}


@durableflow.workflow("cw.keyless")
def keyless_wf(ctx, params):
    board = ctx.step.store(Board, id=params["id"])
    before = board.get()
    ready = board.when(lambda state: state["ready"])
    return {"version": before.version, "ready": ready}


def test_get_and_when_take_their_key_from_the_call_site(backend):
    execution_id = backend.start("cw.keyless", {"id": "keyless"})
    backend.deliver(execution_id)
    backend.engine.store_update(Board, "keyless", set_key("ready", "now"))
    assert backend.run(execution_id).result == {"version": 0, "ready": "now"}
    keys = [(r.key.split(":")[0], r.kind) for r in backend.records(execution_id)]
    assert keys == [(__name__, "store_get"), (__name__, "store_when")]
