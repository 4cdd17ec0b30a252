"""Composition on real worker processes: children, map over several workers (and a SIGKILL
among them), continue_as_new, and waiting executions that hold no worker."""

from __future__ import annotations

import signal
import time

import pytest

import durableflow
from durableflow import dispatch
from durableflow.models import Execution, StepRecord
from tests.helpers import uid, wait_for, wait_status
from tests.testapp.models import Marker


@pytest.fixture
def workers(cluster):
    """Start workers on a test's own queues; they are stopped when the test ends, pass or fail."""
    started = []

    def start(queue: str, concurrency: int = 1):
        process = cluster.worker(queue, concurrency=concurrency)
        started.append(process)
        return process

    yield start
    for process in started:
        process.stop()


def test_invoke_returns_the_child_value(cluster, live_db):
    parent = durableflow.start("t.invoke", {"n": 21})
    assert wait_status(parent.id, timeout=30).result == {"value": 42}
    (child,) = Execution.objects.filter(parent_id=parent.id)
    assert (child.root_id, child.status, child.result) == (parent.id, "completed", 42)


def test_a_failing_child_raises_child_execution_error_in_the_parent(cluster, live_db):
    parent = durableflow.start("t.invoke", {"n": 3, "fail": True})
    result = wait_status(parent.id, timeout=30).result
    assert result == {"status": "failed", "message": "child 3 failed on purpose", "code": "CHILD_FAILED"}


def test_twenty_children_started_with_replays_in_between_are_exactly_twenty(cluster, live_db):
    parent = durableflow.start("t.fan-children", {"n": 20})
    done = wait_status(parent.id, timeout=90)
    assert done.result == [2 * i for i in range(20)]
    assert done.deliveries > 5  # the starts were replayed
    assert Execution.objects.filter(parent_id=parent.id).count() == 20
    assert StepRecord.objects.filter(execution_id=parent.id, kind="start").count() == 20


def test_map_of_fifty_items_over_two_worker_processes_returns_them_in_order(cluster, live_db, workers):
    queue = uid("q")
    workers(queue)
    workers(queue)
    execution = durableflow.start("t.map", {"n": 50, "hold": 0.05}, queue=queue)

    done = wait_status(execution.id, timeout=120)

    assert [n for n, _ in done.result] == list(range(50))
    assert len({pid for _, pid in done.result}) == 2
    items = StepRecord.objects.filter(execution_id=execution.id, kind="item")
    assert items.count() == 50 and not items.exclude(status="completed").exists()


def test_map_survives_a_worker_sigkilled_mid_map(cluster, live_db, workers):
    queue, tag = uid("q"), uid("map-kill")
    doomed = workers(queue)
    workers(queue)
    execution = durableflow.start("t.map", {"n": 50, "hold": 0.3, "tag": tag}, queue=queue)
    wait_for(
        lambda: Marker.objects.filter(name__startswith=f"{tag}:").count() >= 10, timeout=60, what="the map to be underway"
    )

    doomed.kill(signal.SIGKILL)
    workers(queue)
    done = wait_status(execution.id, timeout=180)

    assert [n for n, _ in done.result] == list(range(50))
    items = StepRecord.objects.filter(execution_id=execution.id, kind="item")
    keys = list(items.values_list("key", flat=True))
    assert sorted(keys) == sorted(f"items[{n}]" for n in range(50))  # one record per item
    assert set(items.values_list("status", flat=True)) == {"completed"}
    assert items.filter(attempts__gt=1).exists()  # the killed ones ran again, their results recorded once
    assert StepRecord.objects.filter(execution_id=execution.id, key="items").count() == 1
    # Woken once: the delivery that fanned out, and the one the last item's write asked for.
    assert done.deliveries == 2


def test_a_map_whose_item_messages_are_each_sent_three_times_runs_records_and_wakes_once(cluster, live_db, workers):
    queue, tag = uid("q"), uid("map-dup")
    workers(queue, concurrency=2)
    execution = durableflow.start("t.map", {"n": 30, "hold": 0.05, "tag": tag}, queue=queue)
    items = StepRecord.objects.filter(execution_id=execution.id, kind="item")
    wait_for(lambda: items.count() == 30, timeout=60, what="the map to fan out")

    keys = [(execution.id, f"items[{n}]") for n in range(30)]
    for _ in range(2):  # a broker that delivers twice, a sweep that re-sends: copies of every message
        dispatch.send_many(dispatch.RUN_ITEM, keys, queue)
    done = wait_status(execution.id, timeout=120)

    assert [n for n, _ in done.result] == list(range(30))
    assert set(items.values_list("attempts", flat=True)) == {1}  # each claimed once: the copies skipped
    assert Marker.objects.filter(name__startswith=f"{tag}:").count() == 30  # each body ran once
    assert done.deliveries == 2  # woken once


def test_continue_as_new_keeps_journals_short_over_a_thousand_iterations(cluster, live_db):
    first = durableflow.start("t.continue", {"i": 0, "every": 100, "until": 1000})

    assert durableflow.result(first.id, timeout=180) == 1000

    chain = [Execution.objects.get(pk=first.id)]
    while chain[-1].continued_as:
        chain.append(Execution.objects.get(pk=chain[-1].continued_as))
    assert len(chain) == 10
    assert {e.root_id for e in chain} == {first.id}
    assert all(e.status == "completed" for e in chain)
    assert max(StepRecord.objects.filter(execution_id=e.id).count() for e in chain) <= 100


def test_two_hundred_waiting_executions_hold_no_worker(cluster, live_db, workers):
    queue = uid("q")
    workers(queue)
    waiting = [durableflow.start("t.wait-signal", queue=queue).id for _ in range(200)]
    wait_for(
        lambda: Execution.objects.filter(pk__in=waiting, status="waiting").count() == 200,
        timeout=120,
        interval=0.5,
        what="200 executions to wait",
    )

    started = time.monotonic()
    fresh = durableflow.start("t.steps", queue=queue)
    wait_status(fresh.id, timeout=30)
    assert time.monotonic() - started < 5  # the only worker process was free at once

    for execution_id in waiting[:3]:
        durableflow.signal(execution_id, "go", "now")
    for execution_id in waiting[:3]:
        assert wait_status(execution_id, timeout=30).result == "now"
    for execution_id in waiting[3:]:
        durableflow.cancel(execution_id)
