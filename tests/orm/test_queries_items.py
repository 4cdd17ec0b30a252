"""The structural cost of a map, counted on the real database: the statements and commits of one
item task, the parent's fan-out (its items published in a few batches) and its gathering delivery."""

from __future__ import annotations

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

import durableflow
from durableflow import dispatch, operations
from durableflow.models import Execution, StepRecord

QUEUE = "item-count"  # no worker consumes it: every task here runs in this process


@pytest.fixture(autouse=True)
def _gone_afterwards(live_db):
    """The executions here are committed, and some are left unfinished: delete them, so that no
    later test's sweep finds them."""
    yield
    Execution.objects.filter(queue=QUEUE).delete()


def _fanned_out(workflow: str, params: dict) -> str:
    execution = durableflow.start(workflow, params, queue=QUEUE)
    assert operations.deliver(execution.id) == "suspended"
    return execution.id


def _item_task(execution_id: str, key: str) -> tuple[str, list[str]]:
    with CaptureQueriesContext(connection) as captured:
        happened = operations.run_item(execution_id, key)
    return happened, [query["sql"] for query in captured.captured_queries]


def _kinds(queries: list[str]) -> list[str]:
    return ["WITH" if sql.startswith("WITH") else sql.split()[0] for sql in queries]


def _commits(queries: list[str]) -> int:
    """Transactions committed: a statement outside BEGIN ... COMMIT is one (autocommit), a block is one."""
    commits, depth = 0, 0
    for kind in _kinds(queries):
        if kind == "BEGIN":
            depth += 1
        elif kind == "COMMIT":
            depth -= 1
            commits += 1
        elif depth == 0:
            commits += 1
    return commits


def _status(execution_id: str) -> str:
    return Execution.objects.values_list("status", flat=True).get(pk=execution_id)


def test_an_item_task_is_its_claim_and_one_write_and_the_last_wakes_the_execution_in_it(live_db):
    execution_id = _fanned_out("t.faults-map", {"items": [1, 2, 3]})

    for index in range(3):
        happened, queries = _item_task(execution_id, f"double[{index}]")

        assert happened == "completed"
        assert queries[0].startswith('UPDATE "durableflow_steprecord"') and "RETURNING" in queries[0]
        if connection.vendor == "postgresql":
            # The claim, then the outcome, the count off the map's record and, for the last item,
            # the wake-up: one statement. Both commit without waiting for the disk: the map's
            # record, which the gathering delivery writes before the workflow sees a result, does.
            assert _kinds(queries) == ["UPDATE", "WITH"], queries
            assert all("set_config('synchronous_commit', 'off', true)" in sql for sql in queries)
        else:  # the same three UPDATEs in one transaction (the last one only for the last item)
            expected = ["UPDATE", "BEGIN", "UPDATE", "UPDATE", *(["UPDATE"] if index == 2 else []), "COMMIT"]
            assert _kinds(queries) == expected, queries
        assert _commits(queries) == 2
        assert _status(execution_id) == ("pending" if index == 2 else "waiting")  # woken by the last, once

    map_record = StepRecord.objects.get(execution_id=execution_id, key="double")
    assert map_record.meta["left"] == 0


def test_a_repeated_item_task_is_one_statement_that_matches_nothing(live_db):
    execution_id = _fanned_out("t.faults-map", {"items": [1]})
    assert _item_task(execution_id, "double[0]")[0] == "completed"

    happened, queries = _item_task(execution_id, "double[0]")

    assert (happened, _kinds(queries)) == ("skipped", ["UPDATE"])


def test_an_item_of_a_limited_map_sends_the_next_in_the_transaction_that_records_it(live_db):
    execution_id = _fanned_out("t.map", {"n": 3, "limit": 1})

    happened, queries = _item_task(execution_id, "items[0]")

    assert happened == "completed"
    # The count locks the map's record until the commit: items finishing at once pick the next
    # one in turn (the earliest not sent: a SELECT, and its UPDATE).
    if connection.vendor == "postgresql":
        assert _kinds(queries) == ["UPDATE", "BEGIN", "WITH", "SELECT", "UPDATE", "COMMIT"], queries
    else:
        assert _kinds(queries) == ["UPDATE", "BEGIN", "UPDATE", "UPDATE", "SELECT", "UPDATE", "COMMIT"], queries
    assert _commits(queries) == 2
    sent = StepRecord.objects.filter(execution_id=execution_id, kind="item", started_at__isnull=False)
    assert sorted(sent.values_list("key", flat=True)) == ["items[0]", "items[1]"]


@pytest.mark.parametrize("n, batches", [(3, [3]), (30, [4, 8, 16, 2])])
def test_the_fan_out_publishes_its_items_in_batches_that_double_and_the_gathering_delivery_writes_once(
    live_db, monkeypatch, n, batches
):
    published: list[tuple] = []
    monkeypatch.setattr(dispatch, "send_many", lambda task, args_list, queue, *a: published.append((task, args_list)))
    monkeypatch.setattr(dispatch, "send", lambda task, args, queue, *a: published.append((task, [args])))
    execution_id = _fanned_out("t.faults-map", {"items": list(range(n))})

    items = [args_list for task, args_list in published if task == dispatch.RUN_ITEM]
    assert [len(batch) for batch in items] == batches
    assert [args for batch in items for args in batch] == [(execution_id, f"double[{i}]") for i in range(n)]
    for index in range(n):
        assert operations.run_item(execution_id, f"double[{index}]") == "completed"
    with CaptureQueriesContext(connection) as captured:
        assert operations.deliver(execution_id) == "completed"

    # Its claim, the journal read (every result in it), the map's record and the outcome; the
    # map's record waits for the disk (and with it every item's outcome) before the workflow
    # code gets the results.
    gathering = [query["sql"] for query in captured.captured_queries]
    assert _kinds(gathering) == ["UPDATE", "SELECT", "UPDATE", "UPDATE"]
    assert not any("synchronous_commit" in sql for sql in gathering[1:])
    assert durableflow.result(execution_id) == [2 * i for i in range(n)]
