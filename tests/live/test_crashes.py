"""Crash safety on real worker processes: SIGKILL, SIGSTOP, duplicate and lost messages.

Each test counts the invariant it claims in the database: step records per key, step
bodies run (markers written by the bodies themselves), deliveries claimed, values written by
a worker that had lost its lease. Worker logs are read only for what leaves no row behind.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest

import durableflow
from durableflow import dispatch, tasks
from durableflow.models import Execution, StepRecord
from tests.cluster import ROOT
from tests.helpers import steps_of, uid, wait_for, wait_status
from tests.testapp.models import Marker


def _lease_expires_at(execution_id: str):
    return Execution.objects.values_list("lease_expires_at", flat=True).get(pk=execution_id)


def _record_counts(execution_id: str) -> dict[str, int]:
    counts: dict[str, int] = {}
    for key in StepRecord.objects.filter(execution_id=execution_id).values_list("key", flat=True):
        counts[key] = counts.get(key, 0) + 1
    return counts


def test_sigkill_mid_step_resumes_and_the_next_step_runs_once(workers, live_db):
    queue, tag = uid("q"), uid("kill")
    first = workers(queue)
    execution = durableflow.start("t.crash", {"tag": tag, "hold": 60}, queue=queue)
    wait_for(lambda: Marker.count(f"{tag}:slow") == 1, what="the slow step to start")

    first.kill(signal.SIGKILL)
    workers(queue)
    done = wait_status(execution.id, timeout=90)

    assert _record_counts(execution.id) == {"before": 1, "slow": 1, "after": 1}
    assert Marker.count(f"{tag}:before") == 1
    assert Marker.count(f"{tag}:slow") == 2  # the killed attempt, then the one that finished
    assert Marker.count(f"{tag}:after") == 1
    assert done.deliveries >= 2


def test_sigkill_while_an_invoked_child_runs_in_its_parents_delivery_finishes_both_once(workers, live_db):
    queue, tag = uid("q"), uid("inline")
    first = workers(queue)
    parent = durableflow.start("t.invoke-crash", {"tag": tag, "hold": 60}, queue=queue)
    wait_for(lambda: Marker.count(f"{tag}:slow") == 1, what="the child's slow step to start")
    child = StepRecord.objects.get(execution_id=parent.id, key="child:start").value
    holders = set(Execution.objects.filter(pk__in=[parent.id, child]).values_list("lease_holder", flat=True))
    assert len(holders) == 1  # one delivery holds both: the child runs inside its parent's

    first.kill(signal.SIGKILL)  # no message was sent for the child: the sweep brings it back
    workers(queue)
    done = wait_status(parent.id, timeout=120)

    assert done.status == "completed" and done.result == wait_status(child, timeout=5).result
    assert _record_counts(child) == {"before": 1, "slow": 1, "after": 1}
    assert _record_counts(parent.id) == {"child:start": 1, "child": 1}
    assert Marker.count(f"{tag}:before") == 1
    assert Marker.count(f"{tag}:slow") == 2  # the killed attempt, then the one that finished
    assert Marker.count(f"{tag}:after") == 1
    assert Execution.objects.filter(parent_id=parent.id).count() == 1


def test_sigkill_after_the_step_commit_does_not_run_the_step_again(workers, live_db):
    queue, tag = uid("q"), uid("commit")
    workers(queue)
    execution = durableflow.start("t.kill-after-commit", {"tag": tag}, queue=queue)

    # The pool process kills itself right after "first" is committed; the worker's master
    # replaces it, and the execution resumes once its lease has expired.
    done = wait_status(execution.id, timeout=90)

    assert Marker.count(f"{tag}:killed") == 1
    assert Marker.count(f"{tag}:first") == 1
    assert Marker.count(f"{tag}:second") == 1
    assert _record_counts(execution.id) == {"first": 1, "second": 1}
    assert done.result["first"] != done.result["second"]  # a new pool process finished it


def test_twenty_duplicate_deliveries_complete_once(workers, live_db):
    queue, tag = uid("q"), uid("dup")
    worker = workers(queue, concurrency=4)
    execution = durableflow.start("t.crash", {"tag": tag, "hold": 3}, queue=queue)
    wait_for(lambda: Marker.count(f"{tag}:slow") == 1, what="the slow step to start")

    for _ in range(20):
        tasks.deliver.apply_async((execution.id,), queue=queue)

    done = wait_status(execution.id, timeout=60)
    # A duplicate that finds the lease taken (or the execution finished) writes nothing, so
    # only the worker's log shows that all 20 were handled before the counts below are read.
    skipped = f"delivery skipped: execution {execution.id}"
    wait_for(lambda: worker.count_in_log(skipped) >= 20, what="all 20 duplicates to be handled")

    assert done.deliveries == 1
    assert _record_counts(execution.id) == {"before": 1, "slow": 1, "after": 1}
    assert [Marker.count(f"{tag}:{step}") for step in ("before", "slow", "after")] == [1, 1, 1]


def test_zombie_worker_writes_are_rejected_after_its_lease_is_taken(workers, live_db):
    queue, tag = uid("q"), uid("zombie")
    first = workers(queue)
    execution = durableflow.start("t.crash", {"tag": tag, "hold": 12}, queue=queue)
    wait_for(lambda: Marker.count(f"{tag}:slow") == 1, what="the slow step to start")
    zombie_pid = Marker.objects.get(name=f"{tag}:slow").pid

    os.kill(zombie_pid, signal.SIGSTOP)  # frozen mid-step: no heartbeat, the lease lapses
    try:
        workers(queue)
        done = wait_status(execution.id, timeout=90)
    finally:
        os.kill(zombie_pid, signal.SIGCONT)
    # A rejected write leaves no row: only the zombie's log shows that it has tried to write
    # its step, so that the records read below are the ones it would have changed.
    rejected_line = f"stale write rejected: step 'slow' of execution {execution.id}"
    wait_for(lambda: first.count_in_log(rejected_line), timeout=60, what="the zombie's write to be rejected")

    records = {record.key: record.value for record in steps_of(execution.id)}
    accepted_stale = [key for key in ("slow", "after") if records[key] == zombie_pid]
    assert accepted_stale == []
    assert records["slow"] == done.result["slow"] != zombie_pid
    final = Execution.objects.get(pk=execution.id)
    assert (final.status, final.result) == ("completed", done.result)
    assert final.deliveries == 2  # the zombie's, then the one that took its lease over
    assert _record_counts(execution.id) == {"before": 1, "slow": 1, "after": 1}
    assert Marker.count(f"{tag}:after") == 1


def test_a_message_that_never_reached_the_broker_is_resent_by_the_sweep(cluster, live_db, monkeypatch):
    monkeypatch.setattr(dispatch, "publish", lambda message: False)
    execution = durableflow.start("t.steps")
    monkeypatch.undo()

    done = wait_status(execution.id, timeout=60)

    assert done.deliveries == 1
    assert _record_counts(execution.id) == {"a": 1, "b": 1, "c": 1}


def test_a_broker_that_lost_its_queue_is_healed_by_the_sweep(workers, live_db):
    queue = uid("q")
    execution = durableflow.start("t.steps", queue=queue)
    from project.celery import app

    with app.connection_for_write() as connection:
        purged = connection.default_channel.queue_purge(queue)
    assert purged == 1  # the only wake-up message is gone, as after a broker restart

    workers(queue)
    done = wait_status(execution.id, timeout=60)
    assert done.deliveries == 1


def test_start_returns_while_the_broker_is_down_and_the_sweep_delivers_later(cluster, live_db):
    from django.conf import settings

    if not settings.CELERY_BROKER_URL.startswith(("redis://", "amqp://")):
        pytest.skip("needs a network broker that can be down")
    # Nothing listens on port 1: the same broker, down.
    redis = settings.CELERY_BROKER_URL.startswith("redis://")
    down = "redis://127.0.0.1:1/0" if redis else "amqp://guest:guest@127.0.0.1:1//"
    execution_id = uid("offline")
    script = (
        "import django; django.setup(); import durableflow; "
        f"durableflow.start('t.steps', execution_id={execution_id!r})"
    )
    from django.db import connection

    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "tests.settings",
        "DURABLEFLOW_TEST_DB_NAME": str(connection.settings_dict["NAME"]),
        "CELERY_BROKER_URL": down,
    }
    finished = subprocess.run([sys.executable, "-c", script], cwd=ROOT, env=env, capture_output=True, timeout=60)

    assert finished.returncode == 0, finished.stderr.decode()
    assert b"could not send durableflow.deliver" in finished.stderr
    done = wait_status(execution_id, timeout=60)
    assert done.deliveries == 1


def test_a_step_longer_than_the_lease_keeps_it_by_heartbeat(workers, live_db):
    from django.conf import settings

    queue, tag = uid("q"), uid("long")
    workers(queue, concurrency=2)  # a second pool process is free to take over
    hold = settings.DURABLEFLOW["LEASE_SECONDS"] * 2.5
    execution = durableflow.start("t.crash", {"tag": tag, "hold": hold}, queue=queue)
    wait_for(lambda: Marker.count(f"{tag}:slow") == 1, what="the slow step to start")
    claimed_until = _lease_expires_at(execution.id)

    wait_for(lambda: _lease_expires_at(execution.id) > claimed_until, what="the heartbeat to renew the lease")
    done = wait_status(execution.id, timeout=90)

    assert Marker.count(f"{tag}:slow") == 1  # never taken over, never run twice
    assert done.deliveries == 1  # no other delivery claimed it: the lease was never lost
    assert (done.lease_token, done.lease_expires_at) == (None, None)
