"""Durable stores on real worker processes: contention, crashes, waiters woken by workers and
by views. Each test counts its invariant from database rows."""

from __future__ import annotations

import json
import time

from django.test import Client, override_settings

import durableflow
from durableflow.models import Execution, StepRecord, Store, StoreLedger, StoreWaiter
from tests.helpers import uid, wait_for, wait_status
from tests.testapp.models import Marker
from tests.testapp.stores import CRASH_KEY, Board

EXECUTIONS, INCREMENTS = 50, 20


def _versions(store_id: str) -> list[int]:
    return list(
        StoreLedger.objects.filter(name="t-counter", store_id=store_id)
        .order_by("version")
        .values_list("version", flat=True)
    )


def _applied(store_id: str) -> int:
    return StoreLedger.objects.filter(name="t-counter", store_id=store_id).count()


def _start_increments(store_id: str, queue: str) -> list[str]:
    return [
        durableflow.start("t.store-increments", {"store": store_id, "n": INCREMENTS}, queue=queue).id
        for _ in range(EXECUTIONS)
    ]


def _assert_counted_once(store_id: str, ids: list[str]) -> None:
    for execution_id in ids:
        wait_status(execution_id, timeout=240)
    total = EXECUTIONS * INCREMENTS
    assert Store.objects.get(name="t-counter", store_id=store_id).state == {"n": total}
    assert Store.objects.get(name="t-counter", store_id=store_id).version == total
    assert _versions(store_id) == list(range(1, total + 1))
    # Each execution saw its own increments in order, every one of them a distinct version.
    results = [Execution.objects.get(pk=pk).result for pk in ids]
    assert sorted(v for result in results for v in result) == list(range(1, total + 1))
    assert all(result == sorted(result) for result in results)


def test_fifty_executions_increment_one_counter_a_thousand_times_on_two_processes(cluster, live_db):
    queue, store_id = uid("q"), uid("counter")
    worker = cluster.worker(queue, concurrency=2)
    try:
        ids = _start_increments(store_id, queue)
        _assert_counted_once(store_id, ids)
    finally:
        worker.stop()


def test_the_counter_stays_exact_when_workers_are_killed_during_the_run(cluster, live_db):
    queue, store_id = uid("q"), uid("counter")
    workers = [cluster.worker(queue, concurrency=2)]
    try:
        ids = _start_increments(store_id, queue)
        for threshold in (150, 400, 650):
            wait_for(lambda threshold=threshold: _applied(store_id) >= threshold, timeout=120, interval=0.01)
            workers[-1].kill()
            workers.append(cluster.worker(queue, concurrency=2))
        _assert_counted_once(store_id, ids)
        assert sum(Execution.objects.get(pk=pk).deliveries for pk in ids) > EXECUTIONS  # some were redelivered
    finally:
        for worker in workers:
            worker.stop()


def test_a_crash_between_the_store_commit_and_the_journal_write_replays_the_recorded_outcome(cluster, live_db):
    queue, store_id = uid("q"), uid("crash")
    worker = cluster.worker(queue)
    try:
        execution = durableflow.start("t.store-crash", {"store": store_id}, queue=queue)
        done = wait_status(execution.id, timeout=90)
    finally:
        worker.stop()

    assert Marker.count(f"{execution.id}:died") == 1  # the first delivery died after the store commit
    assert done.deliveries >= 2
    assert Store.objects.get(name="t-counter", store_id=store_id).state == {"n": 1}  # moved once
    (entry,) = StoreLedger.objects.filter(execution_id=execution.id)
    assert (entry.key, entry.version) == (CRASH_KEY, 1)
    assert (
        done.result
        == entry.outcome
        == {"status": "updated", "state": {"n": 1}, "version": 1, "instance_id": entry.instance_id}
    )
    assert StepRecord.objects.get(execution_id=execution.id, key=CRASH_KEY).value == entry.outcome


def _waiting_on_store(execution_id: str) -> Execution:
    def waiting():
        execution = Execution.objects.get(pk=execution_id)
        return (
            execution
            if execution.status == "waiting" and StoreWaiter.objects.filter(execution_id=execution_id).exists()
            else None
        )

    return wait_for(waiting, timeout=60, what=f"execution {execution_id} to wait for its store")


def test_a_when_waiter_is_not_woken_by_other_keys_and_wakes_at_once_on_its_own(cluster, live_db):
    store_id = uid("board")
    execution = durableflow.start("t.store-when", {"store": store_id})
    _waiting_on_store(execution.id)

    for i in range(100):
        durableflow.stores.update(Board, store_id, lambda draft, i=i: draft.update(other=i + 1))

    # Every update committed and was judged in its own transaction: none woke the waiter.
    waiting = Execution.objects.get(pk=execution.id)
    assert (waiting.status, waiting.deliveries) == ("waiting", 1)
    assert StoreWaiter.objects.get(execution_id=execution.id).woken_at is None
    assert Store.objects.get(name="t-board", store_id=store_id).version == 100

    committed = time.time()
    durableflow.stores.update(Board, store_id, lambda draft: draft.update(ready=True))
    done = wait_status(execution.id, timeout=30)
    after = StepRecord.objects.get(execution_id=execution.id, key="after")
    latency = after.finished_at.timestamp() - committed
    assert done.deliveries == 2
    assert done.result["ready"] is True
    assert latency < 1.0, f"the waiter's next step was recorded {latency:.3f} s after the change"


def test_take_hands_out_two_items_to_two_of_three_consumers_and_the_third_on_a_new_item(cluster, live_db):
    store_id = uid("queue")
    durableflow.stores.update(Board, store_id, lambda draft: draft.update(items=["first", "second"]))
    ids = [durableflow.start("t.store-take", {"store": store_id}).id for _ in range(3)]

    def settled():
        statuses = dict(Execution.objects.filter(pk__in=ids).values_list("pk", "status"))
        waiting = [pk for pk, status in statuses.items() if status == "waiting"]
        completed = [pk for pk, status in statuses.items() if status == "completed"]
        return (completed, waiting) if len(completed) == 2 and len(waiting) == 1 else None

    completed, (third,) = wait_for(settled, timeout=60, what="two claims and one waiting consumer")
    claims = sorted(Execution.objects.get(pk=pk).result for pk in completed)
    assert claims == ["first", "second"]
    _waiting_on_store(third)

    durableflow.stores.update(Board, store_id, lambda draft: draft["items"].append("third"))
    assert wait_status(third, timeout=30).result == "third"
    assert Store.objects.get(name="t-board", store_id=store_id).state["items"] == []
    assert StoreLedger.objects.filter(name="t-board", store_id=store_id).count() == 3


@override_settings(ROOT_URLCONF="tests.testapp.urls")
def test_a_store_changed_from_a_view_wakes_a_matching_waiter(cluster, live_db):
    store_id = uid("board")
    execution = durableflow.start("t.store-when", {"store": store_id})
    _waiting_on_store(execution.id)

    response = Client().post(f"/boards/{store_id}/", json.dumps({"other": 7}), content_type="application/json")
    assert response.status_code == 200 and response.json()["version"] == 1
    assert Execution.objects.get(pk=execution.id).status == "waiting"

    response = Client().post(f"/boards/{store_id}/", json.dumps({"ready": "go"}), content_type="application/json")
    assert response.status_code == 200
    assert wait_status(execution.id, timeout=30).result["ready"] == "go"
