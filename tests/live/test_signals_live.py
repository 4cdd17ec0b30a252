"""Signals on real worker processes: the receivers live in the workers (tests/testapp/observers.py)
and write a marker for each signal, so the test reads what each process was told, and where."""

from __future__ import annotations

import os

import durableflow
from tests.helpers import uid, wait_for, wait_status
from tests.testapp.models import Marker


def _told(execution_id: str) -> list[tuple[str, int]]:
    rows = Marker.objects.filter(name__startswith=f"{execution_id}:").order_by("id")
    return [(row.name[len(execution_id) + 1 :], row.pid) for row in rows]


def test_a_run_on_workers_sends_started_once_each_failed_attempt_and_finished_once(workers, live_db):
    queue, tag = uid("q"), uid("signals")
    workers(queue)
    execution = durableflow.start("t.observed", {"tag": tag, "failures": 2}, queue=queue)

    wait_status(execution.id, "completed", timeout=60)
    wait_for(lambda: any(name.startswith("finished") for name, _ in _told(execution.id)), what="execution_finished")

    told = _told(execution.id)
    assert [name for name, _ in told] == [
        "started:running",
        "step_failed:flaky:1:waiting",
        "step_failed:flaky:2:waiting",
        "finished:completed",
    ]
    assert os.getpid() not in {pid for _, pid in told}  # sent where the commit was made: the workers


def test_a_run_that_fails_on_workers_ends_with_finished_failed(workers, live_db):
    queue, tag = uid("q"), uid("signals")
    workers(queue)
    # More failures than its three attempts: the third failure is its last.
    execution = durableflow.start("t.observed", {"tag": tag, "failures": 5, "attempts": 3}, queue=queue)

    wait_status(execution.id, "failed", timeout=60)
    wait_for(lambda: any(name.startswith("finished") for name, _ in _told(execution.id)), what="execution_finished")

    names = [name for name, _ in _told(execution.id)]
    assert names[0] == "started:running" and names[-1] == "finished:failed"
    failed = [name for name in names if name.startswith("step_failed")]
    assert failed[-1].endswith(":failed") and all(name.endswith(":waiting") for name in failed[:-1])
    assert failed == ["step_failed:flaky:1:waiting", "step_failed:flaky:2:waiting", "step_failed:flaky:3:failed"]
