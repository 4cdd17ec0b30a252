"""The storage's conditional updates of one execution or one step record, held against both
storages: each condition (status, lease token, no lease) either matches the row or writes
nothing, and what is written reads back the same (``NOW`` is the storage's clock)."""

from __future__ import annotations

from datetime import timedelta

import durableflow
from durableflow.engine.storage import NOW

WAITING = "updates.waiting"


@durableflow.workflow(WAITING)
def waiting_wf(ctx, params):
    ctx.step.run("a", lambda: 1)
    return ctx.step.wait_for_signal("go", "go")


def _parked(backend) -> str:
    """An execution waiting for a signal, its journal: ``a`` completed, ``go`` waiting."""
    execution_id = backend.start(WAITING)
    assert backend.deliver(execution_id) == "suspended"
    return execution_id


def test_an_execution_update_matches_only_the_statuses_named(backend):
    execution_id = _parked(backend)
    storage = backend.storage

    assert storage.update_execution(execution_id, {"metadata": {"n": 1}}, statuses=["pending", "running"]) == 0
    assert backend.get(execution_id).metadata == {}
    metadata = {"n": 2, "deep": [1, {"x": None}]}
    assert storage.update_execution(execution_id, {"metadata": metadata}, statuses=["waiting"]) == 1
    assert backend.get(execution_id).metadata == metadata
    assert storage.update_execution("no-such-execution", {"metadata": {}}) == 0


def test_an_execution_update_fenced_by_a_token_or_by_no_lease(backend):
    execution_id = _parked(backend)
    storage = backend.storage

    # Parked: no lease. ``None`` means "no lease is held".
    assert storage.update_execution(execution_id, {"compensable": True}, token="some-token") == 0
    assert storage.update_execution(execution_id, {"compensable": True}, token=None) == 1
    assert storage.update_execution(execution_id, {"lease_token": "mine"}) == 1
    assert storage.update_execution(execution_id, {"compensable": False}, token=None) == 0
    assert storage.update_execution(execution_id, {"compensable": False}, token="another") == 0
    assert storage.update_execution(execution_id, {"compensable": False}, token="mine") == 1
    assert backend.get(execution_id).compensable is False


def test_an_update_to_now_writes_the_storage_clock(backend):
    execution_id = _parked(backend)
    before = backend.storage.now()
    assert backend.storage.update_execution(execution_id, {"wake_at": NOW, "waiting_for": None}) == 1
    execution = backend.get(execution_id)
    after = backend.storage.now()

    assert before - timedelta(seconds=1) <= execution.wake_at <= after + timedelta(seconds=1)
    assert execution.waiting_for is None


def test_a_step_update_matches_only_its_statuses_and_the_lease_named(backend):
    execution_id = _parked(backend)
    storage = backend.storage
    finished = storage.now()

    assert storage.update_step(execution_id, "go", {"value": 1}, statuses=["completed"]) == 0
    assert storage.update_step(execution_id, "go", {"value": 1}, token="not-held") == 0
    assert storage.update_step(execution_id, "missing", {"value": 1}) == 0
    assert storage.update_step(execution_id, "go", {"attempts": 2}, token=None, statuses=["waiting", "running"]) == 1
    storage.update_execution(execution_id, {"lease_token": "held"})
    assert storage.update_step(execution_id, "go", {"value": 1}, token=None) == 0
    changed = {"status": "completed", "value": {"payload": ["x"]}, "finished_at": finished}
    assert storage.update_step(execution_id, "go", changed, token="held") == 1

    record = {record.key: record for record in backend.records(execution_id)}["go"]
    assert (record.status, record.value, record.attempts) == ("completed", {"payload": ["x"]}, 2)
    assert abs(record.finished_at - finished) < timedelta(milliseconds=1)
    assert {record.key: record for record in backend.records(execution_id)}["a"].value == 1  # untouched
