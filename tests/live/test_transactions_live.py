"""Transactional steps on real worker processes: a step's writes to a project model commit
exactly once, through SIGKILLs, a zombie worker, failing bodies, row locks and conflicts.

Every count comes from committed rows: the ``Counter`` and ``Marker`` rows the bodies write
inside their transactions, and the journal.
"""

from __future__ import annotations

import os
import signal

import pytest
from django.db import connection
from django.utils import timezone

import durableflow
from durableflow.models import Execution, StepRecord
from tests.helpers import uid, wait_for, wait_status
from tests.testapp.models import Counter, Marker


def _pids(tag: str) -> list[int]:
    return list(Marker.objects.filter(name=tag).order_by("id").values_list("pid", flat=True))


def test_fifty_runs_of_twenty_transactional_increments_count_exactly_1000_through_sigkills(cluster, live_db, tmp_path):
    queue, name = uid("q"), uid("counter")
    Counter.objects.create(name=name)
    params = {"name": name, "n": 20, "hold": 0.02, "dir": str(tmp_path)}
    ids = [durableflow.start("t.tx-counter", params, queue=queue).id for _ in range(50)]
    workers = [cluster.worker(queue), cluster.worker(queue)]
    kills = 0
    try:
        for progress in (150, 400, 650):
            wait_for(lambda p=progress: Counter.read(name) >= p, timeout=120, what=f"{progress} increments")
            victim = workers.pop(0)
            (pool_process,) = victim.children()
            inside = tmp_path / f"inside-{pool_process}"
            wait_for(inside.exists, timeout=60, interval=0.001, what="the worker to be inside a body")
            victim.kill(signal.SIGKILL)  # inside a body's transaction, its increment not committed
            kills += 1
            workers.append(cluster.worker(queue))
        for execution_id in ids:
            wait_status(execution_id, timeout=180)
    finally:
        for worker in workers:
            worker.stop()

    assert Counter.read(name) == 1000
    records = StepRecord.objects.filter(execution_id__in=ids)
    assert records.count() == 1000
    # Each committed increment is recorded once, with the value it produced.
    assert sorted(records.values_list("value", flat=True)) == list(range(1, 1001))
    deliveries = sum(Execution.objects.filter(pk__in=ids).values_list("deliveries", flat=True))
    assert deliveries >= 50 + kills  # every kill cut a delivery short; its run was delivered again


def test_a_zombie_transaction_rolls_back_and_only_the_winners_write_remains(cluster, live_db, tmp_path):
    if connection.vendor != "postgresql":
        pytest.skip(
            "SQLite has one writer: a worker frozen inside its transaction holds the database's write lock, "
            "so no other worker can take over until it resumes (see the SQLite test below)"
        )
    queue, tag = uid("q"), uid("zombie")
    first = cluster.worker(queue)
    execution = durableflow.start("t.tx-zombie", {"tag": tag, "dir": str(tmp_path), "hold": 12}, queue=queue)
    started = tmp_path / f"{tag}.started"
    wait_for(lambda: started.exists() and started.read_text().strip(), what="the body to start")
    zombie_pid = int(started.read_text().split()[0])

    os.kill(zombie_pid, signal.SIGSTOP)  # frozen mid-body, its write uncommitted; the lease lapses
    try:
        second = cluster.worker(queue)
        done = wait_status(execution.id, timeout=90)
    finally:
        os.kill(zombie_pid, signal.SIGCONT)
    rejected = f"stale write rejected: step 'write' of execution {execution.id}"
    wait_for(lambda: first.count_in_log(rejected), timeout=60, what="the zombie's record to be rejected")

    winner = done.result
    assert winner != zombie_pid
    assert _pids(tag) == [winner]  # the zombie's write went with its transaction
    (record,) = StepRecord.objects.filter(execution_id=execution.id)
    assert record.value == winner
    second.stop()
    first.stop()


def test_on_sqlite_a_frozen_transaction_keeps_the_write_lock_and_commits_alone_on_resume(cluster, live_db, tmp_path):
    if connection.vendor != "sqlite":
        pytest.skip("the SQLite counterpart of the zombie test above")
    queue, tag = uid("q"), uid("frozen")
    first = cluster.worker(queue)
    execution = durableflow.start("t.tx-zombie", {"tag": tag, "dir": str(tmp_path), "hold": 8}, queue=queue)
    started = tmp_path / f"{tag}.started"
    wait_for(lambda: started.exists() and started.read_text().strip(), what="the body to start")
    frozen_pid = int(started.read_text().split()[0])

    os.kill(frozen_pid, signal.SIGSTOP)
    try:
        second = cluster.worker(queue)  # it cannot claim: the claim needs the write lock
        wait_for(
            lambda: Execution.objects.get(pk=execution.id).lease_expires_at < timezone.now(),
            timeout=30,
            what="the frozen worker's lease to lapse",
        )
    finally:
        os.kill(frozen_pid, signal.SIGCONT)
    done = wait_status(execution.id, timeout=90)

    assert done.result == frozen_pid
    assert _pids(tag) == [frozen_pid]
    assert StepRecord.objects.filter(execution_id=execution.id).count() == 1
    second.stop()
    first.stop()


def test_a_body_that_raises_after_writing_leaves_nothing_and_its_retry_sees_a_clean_table(cluster, live_db, tmp_path):
    tag = uid("raise")
    execution = durableflow.start("t.tx-raise", {"tag": tag, "dir": str(tmp_path), "interval": 2})

    def failed_attempt_recorded():
        return StepRecord.objects.filter(execution_id=execution.id, key="write", status="waiting").exists()

    wait_for(failed_attempt_recorded, what="the first attempt to fail")
    assert Marker.count(tag) == 0  # its write rolled back
    done = wait_status(execution.id, timeout=60)

    assert done.result == {"seen": 0, "attempt": 2}  # the retry found no row of the failed attempt
    assert Marker.count(tag) == 1
    (record,) = StepRecord.objects.filter(execution_id=execution.id)
    assert (record.status, record.attempts) == ("completed", 2)


def test_two_runs_updating_one_row_under_select_for_update_both_complete(cluster, live_db):
    queue, name = uid("q"), uid("locked")
    Counter.objects.create(name=name)
    worker = cluster.worker(queue, concurrency=2)
    try:
        ids = [durableflow.start("t.tx-locked", {"name": name, "hold": 1.0}, queue=queue).id for _ in range(2)]
        done = [wait_status(execution_id, timeout=60) for execution_id in ids]
    finally:
        worker.stop()

    assert sorted(execution.result for execution in done) == [1, 2]
    assert Counter.read(name) == 2


def test_a_forced_serialization_failure_is_run_again_and_recorded_once(cluster, live_db):
    tag = uid("conflict")
    execution = durableflow.start("t.tx-conflict", {"tag": tag})

    done = wait_status(execution.id, timeout=60)

    assert done.result == 2  # the second try of the transaction
    assert Marker.count(tag) == 1  # the first try's write rolled back with it
    (record,) = StepRecord.objects.filter(execution_id=execution.id)
    assert (record.status, record.attempts) == ("completed", 1)
