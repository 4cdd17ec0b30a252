"""Pruning, held against both storages: what goes, what stays, and a retry that races it."""

from __future__ import annotations

from datetime import timedelta

import pytest

import durableflow
from tests.harness import MemoryHarness

AGE = timedelta(minutes=30)


def _boom():
    raise LookupError("broken")


@durableflow.workflow("prune.steps")
def steps_wf(ctx, params):
    ctx.step.run("a", lambda: 1)
    if params.get("fail"):
        ctx.step.run("boom", _boom)
    return ctx.step.run("b", lambda: 2)


@durableflow.workflow("prune.signal")
def signal_wf(ctx, params):
    return ctx.step.wait_for_signal("go", "go")


@durableflow.workflow("prune.parent")
def parent_wf(ctx, params):
    child = ctx.step.start("child:start", "prune.steps", {})  # sent to the workers, not delivered here
    return ctx.step.wait_for_execution("child", child)


def _finished(backend, workflow: str, params=None) -> str:
    execution_id = backend.start(workflow, params or {})
    assert backend.run(execution_id).status in ("completed", "failed")
    return execution_id


def _gone(backend, execution_id: str) -> bool:
    return backend.storage.get_execution(execution_id) is None and backend.storage.steps(execution_id) == []


def _pruned(backend, older_than: timedelta = AGE, **options) -> set[str]:
    """Prune; the ids it deleted (live tests leave finished runs of their own in the database:
    those go too, inside this test's transaction)."""
    before = set(backend.storage.execution_ids())
    count = backend.engine.prune(older_than, **options)
    gone = before - set(backend.storage.execution_ids())
    assert count == len(gone)
    return gone


def _signals(backend, execution_id: str) -> int:
    if isinstance(backend, MemoryHarness):
        return sum(e.execution_id == execution_id for e in backend.storage.tables.events.values())
    from durableflow.models import Event

    return Event.objects.filter(execution_id=execution_id).count()


def test_prune_deletes_runs_that_finished_longer_ago_with_their_journals(backend):
    completed = _finished(backend, "prune.steps")
    failed = _finished(backend, "prune.steps", {"fail": True})
    signalled = backend.start("prune.signal")
    backend.run(signalled)
    backend.signal(signalled, "go", {"n": 1})
    assert backend.run(signalled).status == "completed"
    waiting = backend.start("prune.signal")
    assert backend.run(waiting).status == "waiting"
    backend.advance(AGE.total_seconds() + 60)
    young = _finished(backend, "prune.steps")

    gone = _pruned(backend)

    assert {completed, failed, signalled} <= gone and not {young, waiting} & gone
    assert all(_gone(backend, pk) for pk in (completed, failed, signalled))
    assert _signals(backend, signalled) == 0
    # Unfinished, or finished within the age: kept, journals and all.
    assert [r.key for r in backend.records(young)] == ["a", "b"]
    assert backend.get(waiting).status == "waiting"
    assert _pruned(backend) == set()


def test_prune_deletes_in_batches(backend):
    ids = [_finished(backend, "prune.steps") for _ in range(5)]
    backend.advance(AGE.total_seconds() + 60)

    assert set(ids) <= _pruned(backend, batch=2)
    assert all(_gone(backend, pk) for pk in ids)


def test_a_finished_child_is_kept_while_its_unfinished_parent_waits_for_it(backend):
    parent = backend.start("prune.parent")
    backend.deliver(parent)
    child = backend.records(parent)[0].value
    assert backend.run(child).status == "completed"
    assert backend.get(parent).status == "pending"  # woken, not yet delivered
    backend.advance(AGE.total_seconds() + 60)

    assert child not in _pruned(backend)  # the parent reads the child's outcome when it replays
    with backend.storage.atomic():
        assert backend.storage.delete_finished([child]) == 0  # asked for by name, still kept

    assert backend.run(parent).result == 2
    backend.advance(AGE.total_seconds() + 60)
    assert {parent, child} <= _pruned(backend)
    assert _gone(backend, parent) and _gone(backend, child)


def test_a_run_retried_after_the_prune_found_it_is_not_deleted(backend):
    failed = _finished(backend, "prune.steps", {"fail": True})
    backend.advance(AGE.total_seconds() + 60)
    found = backend.storage.prunable(backend.storage.now() - AGE, 100_000)
    assert failed in found

    backend.retry(failed)  # failed -> pending, before the prune's delete
    with backend.storage.atomic():
        assert backend.storage.delete_finished(found) == len(found) - 1

    assert backend.get(failed).status == "pending"
    assert [r.key for r in backend.records(failed)] == ["a", "boom"]


def test_prune_refuses_a_negative_age_or_batch(backend):
    with pytest.raises(ValueError, match="must not be negative"):
        backend.engine.prune(timedelta(seconds=-1))
    with pytest.raises(ValueError, match="at least 1"):
        backend.engine.prune(AGE, batch=0)
