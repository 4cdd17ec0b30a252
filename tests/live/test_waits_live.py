"""Waits on real worker processes: events, signals, tokens and timeouts.

Counted from database rows: every execution reaches the state the test claims, each
event is consumed once per execution.
"""

from __future__ import annotations

import random
import threading
import time

import pytest

import durableflow
from durableflow.models import Execution, Waiter
from tests.helpers import steps_of, uid, wait_for, wait_status


def _waiting_on(execution_id: str, step: str, timeout: float = 30) -> Execution:
    return wait_for(
        lambda: Execution.objects.filter(pk=execution_id, status="waiting", waiting_for__step=step).first(),
        timeout=timeout,
        what=f"execution {execution_id} to wait at {step!r}",
    )


def test_an_event_published_while_the_workflow_sleeps_before_its_wait_is_seen(cluster, live_db):
    order = uid("order")
    execution = durableflow.start("t.wait-event", {"nap": 2, "match": {"order": order}})
    _waiting_on(execution.id, "nap")

    assert durableflow.send_event("t.event", {"order": order, "ok": True}) == 0  # not reached yet

    done = wait_status(execution.id, timeout=30)
    assert done.result == {"order": order, "ok": True}


def test_a_non_matching_event_is_not_seen_and_one_event_id_sent_twice_wakes_once(cluster, live_db):
    order, event_id = uid("order"), uid("event")
    execution = durableflow.start("t.wait-event", {"match": {"order": order}})
    _waiting_on(execution.id, "event")

    assert durableflow.send_event("t.event", {"order": uid("other")}) == 0
    time.sleep(1.5)  # a sweep passes: nothing wakes it
    assert Execution.objects.get(pk=execution.id).status == "waiting"

    assert durableflow.send_event("t.event", {"order": order, "n": 1}, event_id=event_id) == 1
    assert durableflow.send_event("t.event", {"order": order, "n": 2}, event_id=event_id) == 0
    done = wait_status(execution.id, timeout=30)
    assert done.result == {"order": order, "n": 1}
    assert done.deliveries == 2


def test_an_event_racing_the_waiters_registration_is_never_missed(cluster, live_db):
    """200 runs: each event is published while its execution is registering its wait.

    The workflow marks that it runs, pauses 0-20 ms and registers its wait; the test sends
    the event 0-25 ms after the mark, so that sends land before, during and after the
    registration. Four runs go at once.
    """
    runs, tag = 200, uid("race")
    ids: dict[int, str] = {}
    errors = []

    def one_run(n: int) -> None:
        from django.db import connection

        from tests.testapp.models import Marker

        name = f"{tag}-{n}"
        try:
            ids[n] = durableflow.start("t.race", {"n": name, "jitter": 0.02}).id
            wait_for(lambda: Marker.objects.filter(name=name).exists(), timeout=60, interval=0.001, what=name)
            time.sleep(random.uniform(0, 0.025))
            durableflow.send_event("t.race", {"n": name})
        except Exception as exc:  # noqa: BLE001 - reported below
            errors.append(exc)
        finally:
            connection.close()

    def worker(offset: int) -> None:
        for n in range(offset, runs, 4):
            one_run(n)

    threads = [threading.Thread(target=worker, args=(offset,)) for offset in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors, errors

    def finished() -> bool:
        return Execution.objects.filter(pk__in=ids.values(), status="completed").count() == runs

    wait_for(finished, timeout=120, interval=0.5, what="every raced execution to complete")
    results = dict(Execution.objects.filter(pk__in=ids.values()).values_list("id", "result"))
    assert [results[ids[n]]["n"] for n in range(runs)] == [f"{tag}-{n}" for n in range(runs)]
    assert Waiter.objects.filter(execution_id__in=ids.values(), status="satisfied").count() == runs


def test_three_signals_sent_before_the_waits_arrive_in_order(cluster, live_db):
    execution = durableflow.start("t.signals", {"nap": 1})
    _waiting_on(execution.id, "nap")
    for n in (1, 2, 3):
        durableflow.signal(execution.id, "next", {"n": n})

    done = wait_status(execution.id, timeout=30)
    assert done.result == [{"n": 1}, {"n": 2}, {"n": 3}]


def test_a_token_completed_from_python_resumes_the_run_and_a_second_completion_is_refused(cluster, live_db):
    execution = durableflow.start("t.token")
    _waiting_on(execution.id, "approve")

    assert durableflow.complete_token(f"{execution.id}:approve", {"approved_by": "ann"}) == 1
    with pytest.raises(durableflow.InvalidTransition) as caught:
        durableflow.complete_token(f"{execution.id}:approve", {"approved_by": "bob"})
    assert caught.value.code == "TOKEN_ALREADY_COMPLETED"

    assert wait_status(execution.id, timeout=30).result == {"approved_by": "ann"}


def test_a_wait_timeout_raises_wait_timeout_within_the_sweep_interval(cluster, live_db):
    timeout, sweep_interval, margin = 2, 1.0, 1.5
    execution = durableflow.start("t.wait-timeout", {"timeout": timeout})

    done = wait_status(execution.id, timeout=30)

    assert done.result["code"] == "WAIT_TIMEOUT"
    assert timeout <= done.result["waited"] <= timeout + sweep_interval + margin, done.result
    never = next(r for r in steps_of(execution.id) if r.key == "never")
    assert (never.kind, never.status, never.error["code"]) == ("event", "failed", "WAIT_TIMEOUT")


def test_an_event_before_the_execution_started_is_not_seen(cluster, live_db):
    order = uid("order")
    durableflow.send_event("t.event", {"order": order})
    time.sleep(0.01)
    execution = durableflow.start("t.wait-event", {"match": {"order": order}})
    _waiting_on(execution.id, "event")
    durableflow.send_event("t.event", {"order": order, "second": True})
    assert wait_status(execution.id, timeout=30).result == {"order": order, "second": True}


def test_on_event_starts_one_execution_per_event_id(cluster, live_db):
    event_id = uid("created")
    durableflow.send_event("t.created", {"id": event_id}, event_id=event_id)
    durableflow.send_event("t.created", {"id": event_id}, event_id=event_id)
    started = wait_for(
        lambda: list(Execution.objects.filter(workflow="t.on-event", idempotency_key=f"event:{event_id}")),
        what="the on_event execution",
    )
    assert len(started) == 1
    assert wait_status(started[0].id, timeout=30).result == {"got": {"id": event_id}}
