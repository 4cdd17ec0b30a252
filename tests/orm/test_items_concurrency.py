"""Items of one map finishing at the same moment, each on its own connection: they are counted off
one after the other, exactly one finds none left and it wakes the execution, once.

On PostgreSQL the race is forced: a transaction holds the map's record locked while every item's
outcome statement starts (each takes its snapshot with the others' items unfinished) and waits
for that lock; then it lets go. A count read from the statement's snapshot would find some item
unfinished in every one of them, and nobody would wake the execution.
"""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import pytest
from django.db import connection, connections, transaction

import durableflow
from durableflow import operations
from durableflow.engine.states import StepStatus
from durableflow.engine.steering import wake_moves
from durableflow.engine.storage import NOW
from durableflow.models import Execution, StepRecord
from durableflow.orm import OrmStorage
from tests.cluster import wait_for

QUEUE = "item-count"  # no worker consumes it


@pytest.fixture(autouse=True)
def _gone_afterwards(live_db):
    """The executions here are committed, and some are left unfinished: delete them, so that no
    later test's sweep finds them."""
    yield
    Execution.objects.filter(queue=QUEUE).delete()


ITEMS = 6


def _outcome_statements_waiting_for_a_lock() -> int:
    # Every other session on the test database is one of the items' (the text pg_stat_activity
    # shows of a prepared statement can lag behind, so it is not matched).
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT COUNT(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'"
        )
        return cursor.fetchone()[0]


def _at_once(execution_id: str, step: str, record) -> list:
    """``record(storage, key)`` for each item of ``step`` claimed so far, each on its own connection,
    all at the same moment (on PostgreSQL: all waiting for the lock of the step's record, then let go)."""
    claimed = StepRecord.objects.filter(execution_id=execution_id, kind="item", status="running")
    keys = list(claimed.values_list("key", flat=True))
    ready = threading.Barrier(len(keys) + 1)

    def one(key: str):
        try:
            storage = OrmStorage()
            storage.now()  # connected before the start line
            ready.wait()
            return record(storage, key)
        finally:
            connections.close_all()

    with ThreadPoolExecutor(len(keys)) as pool:
        if connection.vendor == "postgresql":
            with transaction.atomic():
                StepRecord.objects.select_for_update().get(execution_id=execution_id, key=step)
                outcomes = [pool.submit(one, key) for key in keys]
                ready.wait()
                wait_for(lambda: _outcome_statements_waiting_for_a_lock() == len(keys), timeout=30, interval=0.01)
        else:  # SQLite serialises writers: they start together and take turns
            outcomes = [pool.submit(one, key) for key in keys]
            ready.wait()
        return [outcome.result(timeout=60) for outcome in outcomes]


def _claim_sent(execution_id: str) -> dict[str, int]:
    sent = StepRecord.objects.filter(execution_id=execution_id, kind="item", started_at__isnull=False, status="waiting")
    return {key: OrmStorage().claim_item(execution_id, key, 60)[0] for key in sent.values_list("key", flat=True)}


def _done(storage, execution_id: str, key: str, attempts: dict[str, int]):
    fields = {"status": StepStatus.COMPLETED, "value": 1, "finished_at": NOW}
    return storage.record_item(execution_id, key, attempts[key], fields, step=key.partition("[")[0], wake=wake_moves())


def test_items_finishing_at_once_are_counted_one_after_the_other_and_the_last_wakes_the_execution(live_db):
    execution = durableflow.start("t.faults-map", {"items": list(range(ITEMS))}, queue=QUEUE)
    assert operations.deliver(execution.id) == "suspended"
    attempts = _claim_sent(execution.id)

    recorded = _at_once(execution.id, "double", lambda storage, key: _done(storage, execution.id, key, attempts))

    assert sorted(r.left for r in recorded) == list(range(ITEMS))
    assert [r.woken for r in recorded if r.woken is not None] == [(QUEUE, "waiting")]
    assert Execution.objects.values_list("status", flat=True).get(pk=execution.id) == "pending"
    assert operations.deliver(execution.id) == "completed"
    assert durableflow.result(execution.id) == [1] * ITEMS


def test_items_of_a_limited_map_finishing_at_once_each_send_a_different_next_one(live_db):
    execution = durableflow.start("t.map", {"n": 2 * ITEMS, "limit": ITEMS}, queue=QUEUE)
    assert operations.deliver(execution.id) == "suspended"
    attempts = _claim_sent(execution.id)

    def record_and_send_next(storage, key):
        with storage.atomic():  # as the item task does: the next one in the transaction that records it
            _done(storage, execution.id, key, attempts)
            return storage.send_next_item(execution.id)

    following = _at_once(execution.id, "items", record_and_send_next)

    assert sorted(key for key, _ in following) == sorted(f"items[{n}]" for n in range(ITEMS, 2 * ITEMS))
