"""durableflow.testing runs a project's workflows with no database, broker or worker."""

from __future__ import annotations

import pytest

import durableflow
from durableflow.testing import WorkflowTester


def test_demo_workflows_run_to_the_end_in_memory():
    tester = WorkflowTester()

    order = tester.start("demo.order-total", {"order_id": 7})
    assert tester.run_until_finished(order.id)["total_cents"] == 1500

    reminder = tester.start("demo.reminder", {"seconds": 3600, "message": "hi"})
    result = tester.run_until_finished(reminder.id)
    assert result["message"] == "hi"
    assert [r.key for r in tester.records(reminder.id)] == ["pick-number", "wait", "$now:1"]

    flaky = tester.start("demo.flaky-import", {"failures": 2})
    assert tester.run_until_finished(flaky.id) == {"deliveries": 3, "status": "imported"}
    assert tester.records(flaky.id)[0].attempts == 3


def _broken():
    raise LookupError("attempt 1 failed")


@durableflow.workflow("testing.broken")
def broken(ctx, params):
    return ctx.step.run("broken", _broken)


def test_a_failed_run_raises_execution_failed():
    tester = WorkflowTester()
    execution = tester.start("testing.broken")
    with pytest.raises(durableflow.ExecutionFailed) as caught:
        tester.run_until_finished(execution.id)
    assert caught.value.status == "failed"
    assert caught.value.error["message"] == "attempt 1 failed"


def test_stores_in_memory_wake_waiters_changed_from_outside():
    tester = WorkflowTester()
    execution = tester.start("t.store-when", {"store": "tested"})
    tester.run()
    assert tester.get(execution.id).status == "waiting"

    tester.update_store("t-board", "tested", lambda draft: draft.update(other=1))
    assert tester.runnable() == []
    result = tester.update_store("t-board", "tested", lambda draft: draft.update(ready=True))
    assert (result.status, result.version) == ("updated", 2)
    assert tester.runnable() == [execution.id]
    tester.storage.outbox.clear()
    assert tester.get_store("t-board", "tested").state["ready"] is True


def test_the_tester_drives_waits_children_and_map_items():
    tester = WorkflowTester()

    waiting = tester.start("t.wait-event", {"match": {"order": 1}})
    tester.run()
    assert tester.get(waiting.id).status == "waiting"
    assert tester.send_event("t.event", {"order": 1}) == 1
    assert tester.run_until_finished(waiting.id) == {"order": 1}

    assert tester.run_until_finished(tester.start("t.invoke", {"n": 4}).id) == {"value": 8}

    mapped = tester.run_until_finished(tester.start("t.map", {"n": 5}).id)
    assert [n for n, _ in mapped] == [0, 1, 2, 3, 4]


@durableflow.workflow("testing.deadline-nap")
def deadline_nap(ctx, params):
    ctx.step.sleep("nap", 3600)
    return "woke"


def test_the_tester_moves_its_clock_to_a_deadline_and_cancels_the_run_there():
    tester = WorkflowTester()
    late = tester.start("testing.deadline-nap", deadline=60)
    in_time = tester.start("testing.deadline-nap", deadline=7200)

    with pytest.raises(durableflow.ExecutionFailed) as caught:
        tester.run_until_finished(late.id)
    assert (caught.value.status, caught.value.error["code"]) == ("cancelled", "DEADLINE_EXCEEDED")
    assert tester.run_until_finished(in_time.id) == "woke"


@durableflow.workflow("testing.one-per-customer", concurrency=durableflow.Concurrency(key="params.customer"))
def one_per_customer(ctx, params):
    ctx.step.sleep("nap", 60)
    return ctx.step.run("done", lambda: params["n"])


def test_the_tester_holds_a_concurrency_key_and_admits_the_queue_in_start_order():
    tester = WorkflowTester()
    runs = [tester.start("testing.one-per-customer", {"customer": "A", "n": n}) for n in range(3)]
    assert tester.get(runs[2].id).waiting_for == {"kind": "concurrency", "key": "A", "position": 2}
    assert tester.runnable() == [runs[0].id]

    assert tester.run_until_finished(runs[2].id) == 2
    finished = sorted(runs, key=lambda run: tester.get(run.id).finished_at)
    assert [run.id for run in finished] == [run.id for run in runs]
@durableflow.workflow("testing.rate-limited")
def rate_limited(ctx, params):
    return ctx.step.run("call", lambda n: n, params["n"], rate_limit=durableflow.RateLimit("testing-api", 2, 10.0))


def test_the_tester_holds_rate_limits_and_moves_its_clock_until_a_unit_frees():
    tester = WorkflowTester()
    runs = [tester.start("testing.rate-limited", {"n": n}) for n in range(3)]

    tester.run()

    assert [tester.get(run.id).status for run in runs] == ["completed", "completed", "waiting"]
    waiting = tester.get(runs[2].id)
    assert (waiting.waiting_for["kind"], waiting.waiting_for["key"]) == ("rate_limit", "testing-api")
    assert tester.run_until_finished(runs[2].id) == 2
    admitted = [a.admitted_at for a in tester.storage.admissions("testing-api")]
    assert (admitted[2] - admitted[0]).total_seconds() == 10.0
