"""Sagas on real worker processes: compensations, cancels, retry/rerun/fork, metadata.

Each test counts what it claims in the database: bodies and compensations write ``Marker``
rows (numbered, so their order shows), journals are read per key, and the compensation report
is read off the execution. Worker logs are read only for what leaves no row behind (a refused
write).
"""

from __future__ import annotations

import signal

import pytest

import durableflow
from durableflow import tasks
from durableflow.engine.steps.children import child_execution_id
from durableflow.models import Execution, StepRecord
from tests.helpers import steps_of, uid, wait_for, wait_status
from tests.testapp.models import Marker


def _markers(tag: str) -> list[str]:
    """The markers of ``tag``, in the order they were written, without the tag."""
    names = Marker.objects.filter(name__startswith=f"{tag}:").order_by("id").values_list("name", flat=True)
    return [name[len(tag) + 1 :] for name in names]


def _report(execution) -> list[tuple]:
    return [(c["step"], c["status"], (c["error"] or {}).get("code")) for c in execution.compensations]


def _keys(execution_id: str) -> list[str]:
    return [record.key for record in steps_of(execution_id)]


def test_cancel_of_a_waiting_run_compensates_in_reverse_order_exactly_once(workers, live_db):
    queue, tag = uid("q"), uid("trip")
    worker = workers(queue)
    execution = durableflow.start("t.saga-trip", {"tag": tag}, queue=queue)
    wait_status(execution.id, "waiting")

    assert durableflow.cancel(execution.id, "customer asked").status in ("pending", "running", "cancelled")
    done = wait_status(execution.id, "cancelled")

    assert _markers(tag) == ["flight", "hotel", "undo-hotel", "undo-flight"]
    assert _report(done) == [("hotel", "completed", None), ("flight", "completed", None)]
    assert done.error == {"code": "CANCELLED", "message": "customer asked"}
    # Whatever arrives later, it never runs again.
    for _ in range(5):
        tasks.deliver.apply_async((execution.id,), queue=queue)
    skipped = f"delivery skipped: execution {execution.id}"
    wait_for(lambda: worker.count_in_log(skipped) >= 5, what="the late messages to be handled")
    with pytest.raises(durableflow.InvalidTransition):
        durableflow.signal(execution.id, "confirm")
    assert _markers(tag) == ["flight", "hotel", "undo-hotel", "undo-flight"]
    assert Execution.objects.get(pk=execution.id).deliveries == 2


def test_sigkill_during_the_first_compensation_runs_each_exactly_once(workers, live_db):
    queue, tag = uid("q"), uid("kill-undo")
    first = workers(queue)
    execution = durableflow.start("t.saga-trip", {"tag": tag, "hold_undo": 60}, queue=queue)
    wait_status(execution.id, "waiting")
    durableflow.cancel(execution.id)
    wait_for(lambda: Marker.count(f"{tag}:undo-hotel") == 1, what="the first compensation to start")

    first.kill(signal.SIGKILL)
    workers(queue)
    done = wait_status(execution.id, "cancelled", timeout=90)

    # Neither compensation ran twice: the one cut short is reported for an operator to check.
    assert _markers(tag) == ["flight", "hotel", "undo-hotel", "undo-flight"]
    assert _report(done) == [("hotel", "failed", "COMPENSATION_INTERRUPTED"), ("flight", "completed", None)]
    assert sorted(_keys(execution.id)) == sorted(["flight", "hotel", "confirm", "$compensate:hotel", "$compensate:flight"])
    assert done.deliveries >= 3


def test_an_uncaught_error_compensates_and_a_failing_compensation_is_reported(workers, live_db):
    queue, tag, broken = uid("q"), uid("fail"), uid("broken")
    workers(queue)
    compensated = durableflow.start("t.saga-trip", {"tag": tag, "fail": True}, queue=queue)
    partly = durableflow.start("t.saga-trip", {"tag": broken, "fail": True, "broken": True}, queue=queue)

    done = wait_status(compensated.id, "compensated")
    failed = wait_status(partly.id, "compensation_failed")

    assert _markers(tag) == ["flight", "hotel", "car", "undo-hotel", "undo-flight"]
    assert done.error["message"] == "no car left"
    assert _markers(broken) == ["flight", "hotel", "extra", "car", "undo-broken", "undo-hotel", "undo-flight"]
    assert _report(failed) == [("extra", "failed", "STEP_FAILED"), ("hotel", "completed", None), ("flight", "completed", None)]
    assert failed.compensations[0]["error"]["message"] == "the refund service is down"
    with pytest.raises(durableflow.ExecutionFailed) as raised:
        durableflow.result(partly.id, timeout=5)
    assert raised.value.status == "compensation_failed"


def test_except_base_exception_around_a_step_does_not_stop_a_cancel(workers, live_db):
    queue, tag = uid("q"), uid("swallow")
    worker = workers(queue, concurrency=2)
    execution = durableflow.start("t.saga-swallow", {"tag": tag}, queue=queue)
    wait_for(lambda: Marker.count(f"{tag}:slow") == 1, what="the slow step to start")

    durableflow.cancel(execution.id)
    done = wait_status(execution.id, "cancelled")
    refused = f"stale write rejected: step 'slow' of execution {execution.id}"
    wait_for(lambda: worker.count_in_log(refused), what="the running delivery's write to be refused")
    wait_for(lambda: Marker.count(f"{tag}:swallowed") == 2, what="the running delivery to end")

    # The running delivery swallowed its lost lease, the compensating one the cancel: neither
    # ran another step.
    assert Marker.count(f"{tag}:after") == 0
    assert _markers(tag).count("undo-booked") == 1
    assert _keys(execution.id) == ["booked", "$compensate:booked"]
    assert _report(done) == [("booked", "completed", None)]


def test_a_delivery_running_when_the_cancel_landed_records_nothing_after_it(workers, live_db):
    queue, tag = uid("q"), uid("plain")
    worker = workers(queue)
    execution = durableflow.start("t.plain-slow", {"tag": tag}, queue=queue)
    wait_for(lambda: Marker.count(f"{tag}:slow") == 1, what="the slow step to start")

    cancelled = durableflow.cancel(execution.id)  # no compensation: cancelled at once
    refused = f"stale write rejected: step 'slow' of execution {execution.id}"
    wait_for(lambda: worker.count_in_log(refused), what="the running delivery's write to be refused")

    assert cancelled.status == "cancelled"
    final = Execution.objects.get(pk=execution.id)
    # Its writes after the cancel: none (no step record, no outcome, no other delivery).
    assert _keys(execution.id) == ["first"]
    assert StepRecord.objects.filter(execution_id=execution.id).count() == 1
    assert (final.status, final.result, final.finished_at, final.deliveries) == (
        "cancelled",
        None,
        cancelled.finished_at,
        1,
    )
    assert Marker.count(f"{tag}:after") == 0


def test_retry_reruns_only_the_failed_step_onwards(cluster, live_db):
    tag = uid("retry")
    execution = durableflow.start("t.saga-abc", {"tag": tag, "flaky": True})
    wait_status(execution.id, "failed")

    durableflow.retry(execution.id)
    done = wait_status(execution.id)

    assert done.result == [f"{tag}:a", "b", f"{tag}:c"]
    assert _markers(tag) == ["a", "b", "b", "c"]


def test_fork_from_a_middle_step_reruns_from_there(cluster, live_db):
    tag = uid("fork")
    execution = durableflow.start("t.saga-abc", {"tag": tag})
    first = wait_status(execution.id)

    fork = durableflow.fork(execution.id, from_step="b")
    done = wait_status(fork.id)

    assert done.result == first.result
    assert _markers(tag) == ["a", "b", "c", "b", "c"]
    assert (done.origin_id, done.origin_kind, done.origin_step) == (execution.id, "fork", "b")
    assert _keys(fork.id) == ["a", "b", "c"]


def test_rerun_makes_a_new_linked_execution(cluster, live_db):
    tag = uid("rerun")
    execution = durableflow.start("t.saga-abc", {"tag": tag})
    wait_status(execution.id)

    rerun = durableflow.rerun(execution.id)
    done = wait_status(rerun.id)

    assert (done.params, done.origin_id, done.origin_kind) == ({"tag": tag}, execution.id, "rerun")
    assert _markers(tag) == ["a", "b", "c", "a", "b", "c"]
    assert Execution.objects.get(pk=execution.id).status == "completed"


def test_ten_children_count_on_their_parent_once_each_also_when_one_is_killed(workers, live_db):
    queue, tag = uid("q"), uid("meta")
    first = workers(queue, concurrency=2)
    parent = durableflow.start("t.meta-parent", {"tag": tag, "n": 10, "hold_child": 3}, queue=queue)
    children = [child_execution_id(parent.id, f"start-{n}") for n in range(10)]
    others = [child for n, child in enumerate(children) if n != 3]
    wait_for(lambda: Marker.count(f"{tag}:hold-3") == 1, what="child 3 to count itself and hold")
    wait_for(
        lambda: Execution.objects.filter(pk__in=others, status="completed").count() == 9,
        timeout=90,
        what="the nine other children to finish",
    )
    assert Execution.objects.get(pk=parent.id).metadata["done"] == 10  # live, before the kill

    first.kill(signal.SIGKILL)  # child 3 dies after its changes committed
    workers(queue)
    done = wait_status(parent.id, timeout=120)

    assert done.metadata["done"] == 10
    assert sorted(done.metadata["children"]) == list(range(10))
    assert Marker.count(f"{tag}:hold-3") == 2  # child 3 replayed
    changes = StepRecord.objects.filter(execution_id=children[3], kind="metadata")
    assert sorted(changes.values_list("key", flat=True)) == ["$metadata:1", "$metadata:2"]
    assert done.result == list(range(10))
