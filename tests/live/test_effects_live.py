"""Effects on real worker processes, against a fake external service kept in the database
(``tests.testapp.service``): it counts every call and every charge, across processes and
crashes, and is not idempotent, so a charge too many would show.
"""

from __future__ import annotations

import os
import signal

import psutil
import pytest

import durableflow
from durableflow.models import Effect, Execution
from tests.helpers import status_of, uid, wait_for, wait_status
from tests.testapp import service
from tests.testapp.models import Marker, ServiceCall, ServiceCharge


def _first_charge(effect_id: str) -> dict:
    return ServiceCharge.objects.filter(effect_id=effect_id).order_by("id").first().result


def test_perform_succeeds_and_a_replay_performs_nothing(cluster, live_db):
    effect_id = uid("pay")
    execution = durableflow.start("t.effect", {"effect_id": effect_id, "nap": 1})

    done = wait_status(execution.id, timeout=60)

    assert done.deliveries >= 2  # the nap ended the first delivery; the second replayed the effect
    assert done.result["receipt"] == _first_charge(effect_id)
    assert (service.charges(effect_id), service.calls(effect_id)) == (1, 1)
    effect = Effect.objects.get(pk=effect_id)
    assert (effect.status, effect.result, effect.attempts) == ("settled", done.result["receipt"], 1)


def test_perform_that_raises_after_the_work_is_settled_by_lookup(cluster, live_db):
    effect_id = uid("pay")
    service.will(effect_id, "perform", "raise-after")
    execution = durableflow.start("t.effect", {"effect_id": effect_id, "retry_in": 1})

    done = wait_status(execution.id, timeout=60)

    assert done.result["receipt"] == _first_charge(effect_id)
    assert service.charges(effect_id) == 1
    assert (service.calls(effect_id, "perform"), service.calls(effect_id, "lookup")) == (1, 1)


def test_lookup_not_found_performs(cluster, live_db):
    effect_id = uid("pay")
    service.will(effect_id, "perform", "raise-before")
    execution = durableflow.start("t.effect", {"effect_id": effect_id, "retry_in": 1})

    done = wait_status(execution.id, timeout=60)

    assert done.result["receipt"] == _first_charge(effect_id)
    assert service.charges(effect_id) == 1
    outcomes = list(ServiceCall.objects.filter(effect_id=effect_id).order_by("id").values_list("call", "outcome"))
    assert outcomes == [("perform", "refused"), ("lookup", "answered"), ("perform", "charged")]


def test_lookup_unknown_waits_retry_in_and_looks_up_again(cluster, live_db):
    effect_id, retry_in = uid("pay"), 2
    service.will(effect_id, "perform", "raise-after")
    service.will(effect_id, "lookup", "unknown")
    execution = durableflow.start("t.effect", {"effect_id": effect_id, "retry_in": retry_in})

    done = wait_status(execution.id, timeout=60)

    calls = list(ServiceCall.objects.filter(effect_id=effect_id).order_by("id").values_list("call", "created_at"))
    assert [call for call, _ in calls] == ["perform", "lookup", "lookup"]
    gaps = [(later - earlier).total_seconds() for (_, earlier), (_, later) in zip(calls, calls[1:])]
    assert all(gap >= retry_in - 0.2 for gap in gaps), gaps  # each wait lasted retry_in
    assert done.result["receipt"] == _first_charge(effect_id)
    assert service.charges(effect_id) == 1


def test_two_executions_with_one_effect_id_perform_once_and_share_the_result(cluster, live_db):
    effect_id = uid("pay")
    service.will(effect_id, "perform", "slow-after")  # the second arrives while the first is mid-call
    first = durableflow.start("t.effect", {"effect_id": effect_id, "retry_in": 30})
    second = durableflow.start("t.effect", {"effect_id": effect_id, "retry_in": 30})

    # retry_in is long: only the settle's wake-up can finish the one that waited in time.
    results = [wait_status(e.id, timeout=20).result["receipt"] for e in (first, second)]

    assert results[0] == results[1] == _first_charge(effect_id)
    assert service.charges(effect_id) == 1
    assert service.calls(effect_id, "perform") == 1


def test_sigkill_inside_perform_after_the_work_is_settled_by_lookup(cluster, live_db):
    queue, effect_id = uid("q"), uid("pay")
    worker = cluster.worker(queue)
    service.will(effect_id, "perform", "hang-after")
    execution = durableflow.start("t.effect", {"effect_id": effect_id, "retry_in": 1}, queue=queue)
    wait_for(lambda: service.charges(effect_id) == 1, timeout=60, what="the charge to be made")

    worker.kill(signal.SIGKILL)  # inside perform, the charge made and the reply not yet back
    replacement = cluster.worker(queue)
    try:
        done = wait_status(execution.id, timeout=90)
    finally:
        replacement.stop()

    assert service.charges(effect_id) == 1
    assert (service.calls(effect_id, "perform"), service.calls(effect_id, "lookup")) == (1, 1)
    assert done.result["receipt"] == _first_charge(effect_id)
    assert Effect.objects.get(pk=effect_id).status == "settled"


def test_a_zombie_calls_neither_lookup_nor_perform_after_waking(cluster, live_db):
    queue, tag, effect_id = uid("q"), uid("zombie"), uid("pay")
    first = cluster.worker(queue)
    # The delivery that takes over charges and loses the reply: the effect stays pending.
    service.will(effect_id, "perform", "raise-after")
    execution = durableflow.start("t.effect-pause", {"tag": tag, "effect_id": effect_id, "retry_in": 8}, queue=queue)
    wait_for(lambda: Marker.count(f"{tag}:paused") == 1, timeout=60, what="the workflow to pause")
    zombie_pid = Marker.objects.get(name=f"{tag}:paused").pid
    wait_for(lambda: psutil.Process(zombie_pid).status() == psutil.STATUS_STOPPED, what="the process to stop")

    second = cluster.worker(queue)
    try:
        # The lease lapses (no heartbeat), the sweep re-sends, the second worker takes over.
        wait_for(lambda: service.charges(effect_id) == 1, timeout=90, what="the takeover to perform")
    finally:
        os.kill(zombie_pid, signal.SIGCONT)  # it wakes just before its effect step
    try:
        wait_for(
            lambda: first.count_in_log(f"lease lost: execution {execution.id}"),
            timeout=60,
            what="the zombie to find its lease gone",
        )
        # Its delivery is over; stop the process before it takes an honest delivery (the
        # lookup after retry_in) and its calls could no longer be told apart.
        first.stop()
        calls_by_zombie = service.calls(effect_id, pid=zombie_pid)
        done = wait_status(execution.id, timeout=90)
    finally:
        second.stop()

    assert calls_by_zombie == 0
    assert service.charges(effect_id) == 1
    assert (service.calls(effect_id, "perform"), service.calls(effect_id, "lookup")) == (1, 1)
    assert done.result["pid"] != zombie_pid
    assert done.result["receipt"] == _first_charge(effect_id)


def test_mismatched_input_and_invalid_descriptors_give_their_codes(cluster, live_db):
    effect_id = uid("pay")
    first = durableflow.start("t.effect-catch", {"effect_id": effect_id, "cents": 100})
    wait_status(first.id, timeout=60)
    mismatched = durableflow.start("t.effect-catch", {"effect_id": effect_id, "cents": 200})
    invalid = [
        durableflow.start("t.effect-catch", {"effect_id": uid("pay"), "invalid": name})
        for name in ("empty-id", "negative-retry", "perform-not-callable", "input-not-durable")
    ]

    assert wait_status(mismatched.id, timeout=60).result == {"code": "EFFECT_REQUEST_MISMATCH"}
    assert [wait_status(e.id, timeout=60).result for e in invalid] == [{"code": "INVALID_EFFECT_REQUEST"}] * 4
    assert service.charges(effect_id) == 1


@pytest.mark.timeout(420)
def test_a_hundred_executions_on_ten_effect_ids_perform_ten_times_across_kills(cluster, live_db):
    queue = uid("q")
    effect_ids = [uid("pay") for _ in range(10)]
    for effect_id in effect_ids:
        # Each charge takes a moment to answer, so that a kill often lands inside perform.
        service.will(effect_id, "perform", "slow-after", "slow-after")
    workers = [cluster.worker(queue, concurrency=2), cluster.worker(queue, concurrency=2)]
    executions = [
        durableflow.start("t.effect", {"effect_id": effect_ids[i % 10], "retry_in": 1}, queue=queue).id
        for i in range(100)
    ]

    def made() -> int:
        return ServiceCharge.objects.filter(effect_id__in=effect_ids).count()

    try:
        for threshold in (3, 6):
            wait_for(lambda threshold=threshold: made() >= threshold, timeout=120, what=f"{threshold} charges")
            workers.pop(0).kill(signal.SIGKILL)
            workers.append(cluster.worker(queue, concurrency=2))
        wait_for(
            lambda: Execution.objects.filter(pk__in=executions, status="completed").count() == 100,
            timeout=240,
            what="all 100 executions to complete",
        )
    finally:
        for worker in workers:
            worker.stop()

    assert {effect_id: service.charges(effect_id) for effect_id in effect_ids} == dict.fromkeys(effect_ids, 1)
    receipts = {pk: status for pk, status in Execution.objects.filter(pk__in=executions).values_list("pk", "result")}
    for i, pk in enumerate(executions):
        assert receipts[pk]["receipt"] == _first_charge(effect_ids[i % 10])
    assert not Execution.objects.filter(pk__in=executions).exclude(status="completed").exists()
    assert status_of(executions[0]) == "completed"
