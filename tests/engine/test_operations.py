"""The verbs against the ORM: starts in transactions, results, the sweep's two questions."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

import durableflow
from durableflow import dispatch, operations
from durableflow.models import Execution, StepRecord
from tests.helpers import uid


@pytest.fixture
def published(monkeypatch):
    sent: list[tuple] = []
    monkeypatch.setattr(dispatch, "publish", lambda message: sent.append((*message.args, message.queue)) or True)
    return sent


def test_start_publishes_only_after_commit(db, published, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True) as callbacks:
        execution = durableflow.start("t.steps", {"n": 1})
        assert published == []
    assert len(callbacks) == 1
    assert published == [(execution.id, "durableflow")]
    assert (execution.status, execution.root_id, execution.version) == ("pending", execution.id, "1")


def test_a_repeated_execution_id_returns_the_first_or_conflicts(db, published):
    execution_id = uid("fixed")
    first = durableflow.start("t.steps", {"n": 1}, execution_id=execution_id)
    assert durableflow.start("t.steps", {"n": 1}, execution_id=execution_id).pk == first.pk
    with pytest.raises(durableflow.WorkflowStartError) as caught:
        durableflow.start("t.loop", {"n": 1}, execution_id=execution_id)
    assert caught.value.code == "IDEMPOTENCY_CONFLICT"
    assert Execution.objects.filter(pk=execution_id).count() == 1


def test_start_execution_tells_a_new_start_from_a_repeat(db, published):
    _, created = operations.start_execution("t.steps", {}, idempotency_key="k-1")
    _, again = operations.start_execution("t.steps", {}, idempotency_key="k-1")
    assert (created, again) == (True, False)


def test_result_raises_for_runs_that_did_not_complete(db, published):
    execution = durableflow.start("t.steps")
    with pytest.raises(durableflow.WaitTimeout):
        durableflow.result(execution.id, timeout=0.1)
    durableflow.cancel(execution.id, "not needed")
    with pytest.raises(durableflow.ExecutionFailed) as caught:
        durableflow.result(execution.id)
    assert caught.value.status == "cancelled"
    assert caught.value.error == {"code": "CANCELLED", "message": "not needed"}
    with pytest.raises(durableflow.ExecutionNotFound):
        durableflow.result("no-such-execution")


def test_the_sweep_wakes_due_executions_and_resends_overdue_ones(db, published, django_capture_on_commit_callbacks):
    now = timezone.now()
    due = durableflow.start("t.steps")
    later = durableflow.start("t.steps")
    overdue = durableflow.start("t.steps")
    leased = durableflow.start("t.steps")
    fresh = durableflow.start("t.steps")
    for execution, wake_at in ((due, now - timedelta(seconds=1)), (later, now + timedelta(hours=1))):
        Execution.objects.filter(pk=execution.pk).update(
            status="waiting", wake_at=wake_at, waiting_for={"kind": "timer", "step": "nap"}
        )
        StepRecord.objects.create(
            execution=execution, key="nap", kind="sleep", status="waiting", meta={"until": wake_at.isoformat()}
        )
    Execution.objects.filter(pk__in=[overdue.pk, leased.pk]).update(enqueued_at=now - timedelta(minutes=5))
    Execution.objects.filter(pk=leased.pk).update(
        status="running", lease_token="x" * 32, lease_expires_at=now + timedelta(minutes=1)
    )
    published.clear()

    # Wake-ups are sent once the sweep's transaction commits (here, the test's).
    with django_capture_on_commit_callbacks(execute=True):
        counts = operations.sweep()

    assert {pk for pk, _ in published} >= {due.pk, overdue.pk}
    assert not {pk for pk, _ in published} & {later.pk, leased.pk, fresh.pk}
    assert counts["due"] >= 1 and counts["stale"] >= 1
    assert Execution.objects.get(pk=due.pk).status == "pending"
    assert Execution.objects.get(pk=later.pk).status == "waiting"
    assert StepRecord.objects.get(execution_id=due.pk, key="nap").status == "completed"
    assert StepRecord.objects.get(execution_id=later.pk, key="nap").status == "waiting"
    # Sent once: the next sweep does not send them again until they are overdue again.
    published.clear()
    with django_capture_on_commit_callbacks(execute=True):
        operations.sweep()
    assert not {pk for pk, _ in published} & {due.pk, overdue.pk}


def test_cancel_and_retry_refuse_the_wrong_status(db, published):
    execution = durableflow.start("t.steps")
    with pytest.raises(durableflow.InvalidTransition):
        durableflow.retry(execution.id)
    durableflow.cancel(execution.id)
    with pytest.raises(durableflow.InvalidTransition, match="cancelled"):
        durableflow.cancel(execution.id)
    with pytest.raises(durableflow.ExecutionNotFound):
        durableflow.cancel("no-such-execution")
