"""Workflows on real worker processes: completion, journals, replay, timers, retries."""

from __future__ import annotations

import pytest
from django.db import transaction

import durableflow
from durableflow import dispatch
from durableflow.models import Execution
from tests.helpers import steps_of, uid, wait_for, wait_status
from tests.testapp.models import Marker


def test_started_workflow_completes_with_journal_in_order(cluster, live_db):
    execution = durableflow.start("t.steps", {"n": 1})

    done = wait_status(execution.id)

    assert done.result == {"a": 1, "b": 2, "c": {"sum": 3}}
    records = steps_of(execution.id)
    assert [(r.key, r.kind, r.status, r.attempts) for r in records] == [
        ("a", "run", "completed", 1),
        ("b", "run", "completed", 1),
        ("c", "run", "completed", 1),
    ]
    assert all(r.started_at <= r.finished_at for r in records)
    assert durableflow.result(execution.id, timeout=5) == done.result


def test_rolled_back_start_leaves_nothing_and_runs_nothing(cluster, live_db, monkeypatch):
    published = []
    real_publish = dispatch.publish
    monkeypatch.setattr(dispatch, "publish", lambda message: published.append(message.args) or real_publish(message))
    tag = uid("rollback")

    with pytest.raises(RuntimeError), transaction.atomic():
        doomed = durableflow.start("t.marker", {"tag": tag})
        assert Execution.objects.filter(pk=doomed.id).exists()
        raise RuntimeError("the view failed")

    assert not Execution.objects.filter(pk=doomed.id).exists()
    assert published == []
    # A committed start behind it on the same queue completes: had the first one run, its
    # marker would exist by then.
    barrier = durableflow.start("t.marker", {"tag": f"{tag}-barrier"})
    wait_status(barrier.id)
    assert Marker.count(tag) == 0
    assert [args[0] for args in published] == [barrier.id]


def test_start_many_executions_all_complete_on_the_workers(cluster, live_db):
    tag = uid("many")
    params = [{"tag": f"{tag}-{n}"} for n in range(20)]
    keys = [f"{tag}-{n}" for n in range(20)]

    executions = durableflow.start_many("t.marker", params, keys)
    assert [e.id for e in durableflow.start_many("t.marker", params, keys)] == [e.id for e in executions]

    for execution, each in zip(executions, params):
        assert wait_status(execution.id).params == each
    assert [Marker.count(each["tag"]) for each in params] == [1] * 20


def test_replay_returns_the_recorded_random_value_after_a_sleep(cluster, live_db):
    execution = durableflow.start("t.random-sleep", {"seconds": 2})

    done = wait_status(execution.id)

    assert done.result["before"] == done.result["after"]
    assert done.deliveries == 2  # one before the sleep, one after: the draw was replayed
    draw = steps_of(execution.id)[0]
    assert (draw.key, draw.value) == ("draw", done.result["before"])


def test_a_set_step_value_raises_invalid_step_value_into_the_workflow(cluster, live_db):
    execution = durableflow.start("t.set-value")

    done = wait_status(execution.id)

    assert done.result == {"code": "INVALID_STEP_VALUE"}
    (bad,) = steps_of(execution.id)
    assert (bad.status, bad.attempts, bad.error["code"]) == ("failed", 1, "INVALID_STEP_VALUE")


def test_nan_params_are_refused_at_start_with_nothing_written(cluster, live_db):
    before = Execution.objects.count()

    with pytest.raises(durableflow.WorkflowStartError) as caught:
        durableflow.start("t.steps", {"x": float("nan")})

    assert caught.value.code == "INVALID_PARAMS"
    assert "/x" in caught.value.message
    assert Execution.objects.count() == before


def test_sleep_wakes_no_earlier_than_due_and_within_one_sweep(cluster, live_db):
    seconds = 3
    execution = durableflow.start("t.timer", {"seconds": seconds})

    done = wait_status(execution.id, timeout=30)

    slept = done.result["t1"] - done.result["t0"]
    sweep_interval, margin = 1.0, 1.5
    assert seconds <= slept <= seconds + sweep_interval + margin, slept
    timer = next(r for r in steps_of(execution.id) if r.key == "timer")
    assert (timer.kind, timer.status) == ("sleep", "completed")


def test_retryable_error_waits_durably_without_holding_a_worker(workers, live_db):
    queue = uid("retry")
    workers(queue, concurrency=1)
    tag = uid("flaky")
    flaky = durableflow.start("t.retry", {"tag": tag, "failures": 2, "interval": 5}, queue=queue)

    # While it waits for its second attempt, the only worker process is free for other work.
    waiting = wait_for(
        lambda: Execution.objects.filter(pk=flaky.id, status="waiting").first(), what="the first failed attempt"
    )
    assert waiting.lease_token is None and waiting.waiting_for["kind"] == "retry"
    other = durableflow.start("t.steps", queue=queue)
    wait_status(other.id, timeout=30)
    assert Execution.objects.get(pk=flaky.id).status == "waiting"

    done = wait_status(flaky.id, timeout=60)
    assert done.result == 3
    (record,) = steps_of(flaky.id)
    assert (record.status, record.attempts) == ("completed", 3)
    assert Marker.count(f"{tag}:attempt") == 3
