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

from django.db import connection, connections, transaction

import durableflow
from durableflow import operations
from durableflow.engine.states import StepStatus
from durableflow.engine.steering import wake_moves
from durableflow.engine.storage import NOW
from durableflow.models import Execution, StepRecord
from durableflow.orm import OrmStorage
from tests.cluster import wait_for

QUEUE = "query-count"  # no worker consumes it
ITEMS = 6


def _outcome_statements_waiting_for_a_lock() -> int:
    # Every other session on the test database is one of the items' (the text pg_stat_activity
    # shows of a prepared statement can lag behind, so it is not matched).
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT COUNT(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'"
        )
        return cursor.fetchone()[0]


def test_items_finishing_at_once_are_counted_one_after_the_other_and_the_last_wakes_the_execution(live_db):
    execution = durableflow.start("t.faults-map", {"items": list(range(ITEMS))}, queue=QUEUE)
    assert operations.deliver(execution.id) == "suspended"
    keys = [f"double[{index}]" for index in range(ITEMS)]
    attempts = {key: OrmStorage().claim_item(execution.id, key, 60)[0] for key in keys}
    ready = threading.Barrier(ITEMS + 1)

    def record(key: str):
        try:
            storage = OrmStorage()
            storage.now()  # connected before the start line
            ready.wait()
            fields = {"status": StepStatus.COMPLETED, "value": 1, "finished_at": NOW}
            return storage.record_item(execution.id, key, attempts[key], fields, step="double", wake=wake_moves())
        finally:
            connections.close_all()

    postgresql = connection.vendor == "postgresql"
    with ThreadPoolExecutor(ITEMS) as pool:
        if postgresql:
            with transaction.atomic():
                StepRecord.objects.select_for_update().get(execution_id=execution.id, key="double")
                outcomes = [pool.submit(record, key) for key in keys]
                ready.wait()
                wait_for(lambda: _outcome_statements_waiting_for_a_lock() == ITEMS, timeout=30, interval=0.01)
        else:  # SQLite serialises writers: they start together and take turns
            outcomes = [pool.submit(record, key) for key in keys]
            ready.wait()
        recorded = [outcome.result(timeout=60) for outcome in outcomes]

    assert sorted(r.left for r in recorded) == list(range(ITEMS))
    assert [r.woken for r in recorded if r.woken is not None] == [(QUEUE, "waiting")]
    assert Execution.objects.values_list("status", flat=True).get(pk=execution.id) == "pending"
    assert operations.deliver(execution.id) == "completed"
    assert durableflow.result(execution.id) == [1] * ITEMS
