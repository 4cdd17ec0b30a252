"""Durable stores (SPEC §6), held against both storages: reads, changes applied exactly once,
compare-and-set conflicts, schemas and the rules for selectors and updaters."""

from __future__ import annotations

import pytest
from pydantic import BaseModel

import durableflow
from durableflow import WorkflowValueError
from durableflow.engine.records import LeaseLost
from durableflow.engine.store_types import StepRef
from tests.harness import LEASE_SECONDS

Counter = durableflow.define_store("cs-counter", initial=lambda: {"n": 0, "ready": False, "items": []})


def bump(draft):
    draft["n"] += 1


# Reads -------------------------------------------------------------------------------------------


@durableflow.workflow("cs.read")
def read_wf(ctx, params):
    store = ctx.step.store(Counter, id=params["id"])
    snapshot = store.get("read")
    count = store.select("count", lambda state: state["n"] + len(state["items"]))
    return {"state": snapshot.state, "version": snapshot.version, "instance": snapshot.instance_id, "count": count}


def test_a_missing_store_is_created_from_initial_on_first_use(backend):
    execution_id = backend.start("cs.read", {"id": "fresh"})
    backend.deliver(execution_id)

    result = backend.get(execution_id).result
    assert result["state"] == {"n": 0, "ready": False, "items": []}
    assert result["version"] == 0 and result["count"] == 0
    assert result["instance"] == backend.engine.store_get(Counter, "fresh").instance_id
    kinds = [(r.key, r.kind, r.status, r.meta) for r in backend.records(execution_id)]
    meta = {"store": "cs-counter", "id": "fresh"}
    assert kinds == [("read", "store_get", "completed", meta), ("count", "store_select", "completed", meta)]


def test_the_store_id_defaults_to_the_execution_id(backend):
    @durableflow.workflow("cs.own-store")
    def own(ctx, params):
        return ctx.step.store(Counter).update("bump", bump).version

    execution_id = backend.start("cs.own-store")
    backend.deliver(execution_id)
    assert backend.engine.store_get(Counter, execution_id).state["n"] == 1


# Changes, exactly once -----------------------------------------------------------------------------


@durableflow.workflow("cs.update")
def update_wf(ctx, params):
    store = ctx.step.store(Counter, id=params["id"])
    first = store.update("mutate", bump)
    second = store.update("replace", lambda state: {**state, "n": state["n"] * 10})
    ctx.step.sleep("pause", 5)
    return [first.status, first.version, first.state["n"], second.version, second.state["n"]]


def test_update_mutates_a_draft_or_takes_the_returned_state_and_replays_without_applying_again(backend):
    execution_id = backend.start("cs.update", {"id": "u"})
    backend.run(execution_id)

    assert backend.get(execution_id).result == ["updated", 1, 1, 2, 10]
    assert backend.engine.store_get(Counter, "u").state["n"] == 10  # the replay changed nothing
    assert [(key, version) for _, key, version in backend.ledger("cs-counter", "u")] == [("mutate", 1), ("replace", 2)]


@durableflow.workflow("cs.increment")
def increment_wf(ctx, params):
    return ctx.step.store(Counter, id=params["id"]).update("inc", bump).as_value()


def test_a_change_committed_before_its_journal_record_is_not_applied_again(backend):
    """The crash window: the store's transaction committed, the journal write never happened."""
    execution_id = backend.start("cs.increment", {"id": "gap"})
    crashed = backend.journal(execution_id)
    assert crashed.claim() is not None
    applied = backend.engine.store_update(
        Counter, "gap", bump, step=StepRef(execution_id, "inc", crashed.token, "store_update")
    )
    crashed.close()  # the worker dies here: no journal record, the lease lapses
    backend.advance(LEASE_SECONDS + 1)

    assert backend.deliver(execution_id) == "completed"

    assert backend.get(execution_id).result == applied
    assert backend.engine.store_get(Counter, "gap").state["n"] == 1
    assert [version for _, _, version in backend.ledger("cs-counter", "gap")] == [1]
    (record,) = backend.records(execution_id)
    assert (record.kind, record.value) == ("store_update", applied)


def test_a_delivery_that_lost_its_lease_changes_nothing(backend):
    execution_id = backend.start("cs.increment", {"id": "zombie"})
    zombie = backend.journal(execution_id)
    assert zombie.claim() is not None
    backend.advance(LEASE_SECONDS + 1)
    assert backend.journal(execution_id).claim() is not None  # another delivery takes over

    with pytest.raises(LeaseLost):
        backend.engine.store_update(Counter, "zombie", bump, step=StepRef(execution_id, "inc", zombie.token, "x"))

    assert backend.engine.store_get(Counter, "zombie").version == 0
    assert backend.ledger("cs-counter", "zombie") == []


def test_versions_move_by_one_without_gaps_under_interleaved_deliveries(backend):
    @durableflow.workflow("cs.increments")
    def increments(ctx, params):
        store = ctx.step.store(Counter, id="interleaved")
        for i in range(4):
            store.update(f"inc-{i}", bump)
            ctx.step.sleep(f"nap-{i}", 1)

    ids = [backend.start("cs.increments") for _ in range(6)]
    for _ in range(5):
        for execution_id in ids:
            backend.deliver(execution_id)
        backend.advance(1.5)

    assert backend.engine.store_get(Counter, "interleaved").state["n"] == 24
    assert [version for _, _, version in backend.ledger("cs-counter", "interleaved")] == list(range(1, 25))


# Compare-and-set -------------------------------------------------------------------------------------


@durableflow.workflow("cs.cas")
def cas_wf(ctx, params):
    store = ctx.step.store(Counter, id=params["id"])
    stale = store.get("read")
    store.update("moved-on", bump)
    conflict = store.update_from("stale", stale, bump)
    fresh = store.get("again")
    updated = store.update_from("fresh", fresh, bump)
    refused = store.delete_from("delete-stale", fresh)
    deleted = store.delete_from("delete", updated)
    recreated = store.get("recreated")
    return {
        "conflict": conflict.as_value(),
        "updated": updated.as_value(),
        "refused": refused.status,
        "deleted": deleted.as_value(),
        "recreated": recreated.as_value(),
        "old_instance": stale.instance_id,
    }


def test_update_from_and_delete_from_compare_the_snapshot_and_return_conflict_as_a_value(backend):
    execution_id = backend.start("cs.cas", {"id": "cas"})
    backend.deliver(execution_id)

    result = backend.get(execution_id).result
    assert result["conflict"]["status"] == "conflict"
    assert result["conflict"]["version"] == 1 and result["conflict"]["state"]["n"] == 1  # changed nothing
    assert (result["updated"]["status"], result["updated"]["version"], result["updated"]["state"]["n"]) == (
        "updated",
        2,
        2,
    )
    assert result["refused"] == "conflict"
    deleted = {"status": "deleted", "state": None, "version": 2, "instance_id": result["old_instance"]}
    assert result["deleted"] == deleted
    assert result["recreated"]["version"] == 0 and result["recreated"]["state"]["n"] == 0
    assert result["recreated"]["instance_id"] != result["old_instance"]


# Schemas, values and callbacks ---------------------------------------------------------------------------


class CartModel(BaseModel):
    items: list[str]
    total: int = 0


Cart = durableflow.define_store("cs-cart", initial=lambda: {"items": []}, schema=CartModel)


@durableflow.workflow("cs.schema")
def schema_wf(ctx, params):
    cart = ctx.step.store(Cart, id=params["id"])
    added = cart.update("add", lambda draft: draft["items"].append("apple"))
    try:
        cart.update("bad", lambda draft: draft["items"].append(42))
    except WorkflowValueError as exc:
        return {"code": exc.code, "message": exc.message, "added": added.state}


def test_a_state_the_schema_rejects_changes_nothing_and_raises_at_that_step(backend):
    execution_id = backend.start("cs.schema", {"id": "cart"})
    backend.deliver(execution_id)

    result = backend.get(execution_id).result
    assert result["code"] == "STORE_SCHEMA_INVALID"
    assert "items/1" in result["message"]
    assert result["added"] == {"items": ["apple"], "total": 0}  # stored as the schema dumps it
    snapshot = backend.engine.store_get(Cart, "cart")
    assert (snapshot.state, snapshot.version) == ({"items": ["apple"], "total": 0}, 1)
    bad = {r.key: r for r in backend.records(execution_id)}["bad"]
    assert (bad.kind, bad.status, bad.error["code"]) == ("store_update", "failed", "STORE_SCHEMA_INVALID")


@durableflow.workflow("cs.callbacks")
def callbacks_wf(ctx, params):
    store = ctx.step.store(Counter, id=params["id"])
    codes = {}

    async def async_updater(draft):
        draft["n"] = 99

    def mutating(state):
        state["items"].append("sneaky")
        return True

    def sneaky_when(state):
        state["n"] = 5

    attempts = {
        "async-updater": lambda: store.update("async", async_updater),
        "mutating-select": lambda: store.select("mutating", mutating),
        "mutating-when": lambda: store.when("mutating-when", sneaky_when),
        "set-value": lambda: store.update("set", lambda draft: {"n": {1, 2}}),
        "nested-step": lambda: store.update("nested", lambda draft: ctx.step.run("inner", lambda: 1)),
    }
    for name, attempt in attempts.items():
        try:
            attempt()
        except WorkflowValueError as exc:
            codes[name] = exc.code
    return codes


def test_selectors_must_not_mutate_and_callbacks_must_be_sync(backend):
    execution_id = backend.start("cs.callbacks", {"id": "callbacks"})
    backend.deliver(execution_id)

    assert backend.get(execution_id).result == {
        "async-updater": "STORE_CALLBACK_NOT_SYNC",
        "mutating-select": "STORE_READ_ONLY",
        "mutating-when": "STORE_READ_ONLY",
        "set-value": "INVALID_STORE_STATE",
        "nested-step": "NESTED_STEP",
    }
    snapshot = backend.engine.store_get(Counter, "callbacks")
    assert (snapshot.state, snapshot.version) == ({"n": 0, "ready": False, "items": []}, 0)
    # The async updater is refused before it is a step; the others failed at their step.
    assert {r.key: r.status for r in backend.records(execution_id)} == {
        "mutating": "failed",
        "mutating-when": "failed",
        "set": "failed",
        "nested": "failed",
    }


def test_a_failed_store_step_raises_its_recorded_error_on_replay(backend):
    @durableflow.workflow("cs.failed-replay")
    def failed_replay(ctx, params):
        store = ctx.step.store(Cart, id="replayed")
        try:
            store.update("bad", lambda draft: {"items": "not-a-list"})
        except WorkflowValueError as exc:
            caught = exc.code
        ctx.step.sleep("pause", 1)
        return caught

    execution_id = backend.start("cs.failed-replay")
    assert backend.deliver(execution_id) == "suspended"
    backend.advance(1.5)
    backend.deliver(execution_id)
    assert backend.get(execution_id).result == "STORE_SCHEMA_INVALID"


def test_outside_workflows_a_change_wakes_the_same_way(backend):
    """``durableflow.stores.update`` is this verb without a step: no ledger, no lease."""
    result = backend.engine.store_update(Counter, "outside", bump)
    assert (result["status"], result["version"]) == ("updated", 1)
    stale = backend.engine.store_update(Counter, "outside", bump, expected=(None, 0))
    assert (stale["status"], stale["version"]) == ("conflict", 1)
    assert backend.ledger("cs-counter", "outside") == []


def test_a_transient_database_error_runs_the_change_again_once(backend, monkeypatch):
    class SerializationFailure(Exception):
        sqlstate = "40001"  # what psycopg carries for "could not serialize access"

    write, failures = backend.storage.write_store, []

    def flaky(*args, **kwargs):
        if not failures:
            failures.append(args)
            raise SerializationFailure("could not serialize access due to concurrent update")
        return write(*args, **kwargs)

    monkeypatch.setattr(backend.storage, "write_store", flaky)
    result = backend.engine.store_update(Counter, "transient", bump)
    assert (result["version"], result["state"]["n"], len(failures)) == (1, 1, 1)
    assert backend.engine.store_get(Counter, "transient").version == 1
