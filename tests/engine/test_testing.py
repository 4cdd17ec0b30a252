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


# Pausing, resuming, and code that no longer matches its journal -------------------------------


@durableflow.workflow("testing.approval")
def approval(ctx, params):
    started = ctx.now()
    note = ctx.step.wait_for_signal("approve", "approve")
    return {"note": note, "started": started.isoformat()}


def test_a_paused_run_says_what_it_waits_for_and_resumes_when_given_it():
    from datetime import datetime, timezone

    tester = WorkflowTester(now=datetime(2026, 12, 1, 9, 0, tzinfo=timezone.utc))
    execution = tester.start("testing.approval")
    tester.run()
    assert tester.waiting_for(execution.id) == {"kind": "signal", "name": "approve", "step": "approve", "until": None}

    tester.signal(execution.id, "approve", "ok")
    assert tester.run_until_finished(execution.id) == {"note": "ok", "started": "2026-12-01T09:00:00+00:00"}
    assert tester.waiting_for(execution.id) is None


def test_the_tester_clock_starts_where_it_is_told_and_nowhere_naive():
    from datetime import datetime

    with pytest.raises(ValueError, match="timezone-aware"):
        WorkflowTester(now=datetime(2026, 12, 1))
    with pytest.raises(ValueError, match="not both"):
        WorkflowTester(now=datetime.now().astimezone(), clock=datetime.now)


def test_a_run_the_workers_would_stall_raises_non_determinism_into_the_test():
    from durableflow.registry import WorkflowDefinition, registry

    def changed(ctx, params):
        ctx.step.run("approve", lambda: "no wait any more")  # the journal holds a signal wait here

    tester = WorkflowTester()
    execution = tester.start("testing.approval")
    tester.run()
    tester.signal(execution.id, "approve", "ok")
    with registry.override(WorkflowDefinition("testing.approval", changed)):
        with pytest.raises(durableflow.NonDeterminismError, match="step 'approve' as a 'signal' step") as caught:
            tester.run()
    assert (caught.value.code, caught.value.detail["step"]) == ("NON_DETERMINISM", "approve")


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


def test_the_demo_order_is_approved_by_an_event_fixture_without_a_database():
    import time

    began = time.perf_counter()
    tester = WorkflowTester(events={"order.reviewed": {"order_id": 7, "approved": True}})
    order = tester.start("orders.approval", {"order_id": 7, "items": ["book"]})
    assert tester.run_until_finished(order.id) == {"reservation": "R-7", "tracking": "TRACK-7"}
    assert time.perf_counter() - began < 1.0


def test_a_missing_event_pauses_the_run_and_its_injection_resumes_it():
    tester = WorkflowTester(signals={"unrelated": "x"})
    order = tester.start("orders.approval", {"order_id": 8, "items": ["pen"]})
    tester.run()
    waiting = tester.waiting_for(order.id)
    assert (waiting["kind"], waiting["event_type"], waiting["match"]) == ("event", "order.reviewed", {"order_id": 8})

    tester.send_event("order.reviewed", {"order_id": 8, "approved": False})
    tester.run()
    assert tester.get(order.id).status == "compensated"


@durableflow.workflow("testing.fixtures")
def fixtures(ctx, params):
    note = ctx.step.wait_for_signal("note", "note")
    ok = ctx.step.wait_for_token("sign-off")
    again = ctx.step.wait_for_signal("again", "note")
    return [note, ok, again]


def test_signal_and_token_fixtures_satisfy_each_wait_once_it_is_reached():
    tester = WorkflowTester(signals={"note": "hi"}, tokens={"sign-off": "yes"})
    execution = tester.start("testing.fixtures")
    assert tester.run_until_finished(execution.id) == ["hi", "yes", "hi"]
    with pytest.raises(TypeError, match="dict of payloads"):
        WorkflowTester(events=["order.reviewed"])


@durableflow.workflow("testing.parent")
def parent(ctx, params):
    try:
        return {"child": ctx.step.invoke("quote", "testing.approval")}  # it would wait for a signal
    except durableflow.ChildExecutionError as exc:
        return {"failed": exc.error["message"]}


def test_a_children_fixture_makes_child_runs_return_at_once():
    tester = WorkflowTester(children={"testing.approval": {"note": "stubbed"}})
    execution = tester.start("testing.parent")
    assert tester.run_until_finished(execution.id) == {"child": {"note": "stubbed"}}

    failing = WorkflowTester(children={"testing.approval": LookupError("no quote")})
    execution = failing.start("testing.parent")
    assert failing.run_until_finished(execution.id) == {"failed": "no quote"}
    assert WorkflowTester().engine.registry.get("testing.approval").fn is approval


@durableflow.workflow("testing.dice")
def dice(ctx, params):
    return [ctx.random(), str(ctx.uuid())]


def test_a_seed_fixes_ctx_random_in_every_run():
    first, second = WorkflowTester(seed=42), WorkflowTester(seed=42)
    rolls = [t.run_until_finished(t.start("testing.dice").id) for t in (first, second, first)]
    assert rolls[0] == rolls[1] == rolls[2]
    unseeded = WorkflowTester()
    assert unseeded.run_until_finished(unseeded.start("testing.dice").id) != rolls[0]
    with pytest.raises(TypeError, match="seed"):
        WorkflowTester(seed=1.5)


charged: list[str] = []


def charge_card(order):
    charged.append(order)
    return {"charge": f"ch-{order}"}


@durableflow.workflow("testing.checkout")
def checkout(ctx, params):
    receipt = ctx.step.run("charge", charge_card, params["order"])
    mailed = ctx.step.run("mail", lambda to: f"mailed {to}", params["to"])
    booked = ctx.step.effect(
        "book",
        effect_id=f"book-{params['order']}",
        operation="book",
        input=params["order"],
        retry_in=5,
        lookup=lambda effect_id: None,
        perform=lambda effect_id: {"booked": effect_id},
    )
    return {**receipt, "mailed": mailed, **booked}


def test_a_step_fixture_records_its_value_and_never_calls_the_body():
    charged.clear()
    tester = WorkflowTester(steps={"charge": {"charge": "ch-stub"}, "book": {"booked": "stub"}})
    run = tester.start("testing.checkout", {"order": "o1", "to": "ann"})

    assert tester.run_until_finished(run.id) == {"charge": "ch-stub", "mailed": "mailed ann", "booked": "stub"}
    assert charged == []
    assert [(call.key, call.kind, call.args) for call in tester.calls] == [("mail", "run", ("ann",))]
    assert tester.step_values(run.id)["charge"] == {"charge": "ch-stub"}


def test_a_fixture_may_fail_the_step_or_stand_in_for_the_body_with_its_arguments():
    charged.clear()
    tester = WorkflowTester(steps={"charge": RuntimeError("card declined")})
    failing = tester.start("testing.checkout", {"order": "o2", "to": "bob"})
    with pytest.raises(durableflow.ExecutionFailed) as caught:
        tester.run_until_finished(failing.id)
    assert "card declined" in caught.value.error["message"]
    assert charged == [] and tester.calls == []

    tester.fixture("charge", lambda order: {"charge": f"fake-{order}"})
    done = tester.start("testing.checkout", {"order": "o3", "to": "cy"})
    assert tester.run_until_finished(done.id)["charge"] == "fake-o3"
    assert charged == []
    assert [call.key for call in tester.calls] == ["mail", "book"]


@durableflow.workflow("testing.countdown")
def countdown(ctx, params):
    ctx.metadata.set("left", params["n"])
    if params["n"]:
        ctx.continue_as_new({"n": params["n"] - 1})
    return "done"


def test_the_tester_lists_the_runs_runs_started_and_reads_metadata_and_compensations():
    tester = WorkflowTester(children={"testing.approval": {"note": "stubbed"}})
    parent_run = tester.start("testing.parent")
    tester.run_until_finished(parent_run.id)
    [child] = tester.started
    assert (child.workflow, child.parent_id) == ("testing.approval", parent_run.id)

    counting = WorkflowTester()
    first = counting.start("testing.countdown", {"n": 2})
    assert counting.run_until_finished(first.id) == "done"
    assert [run.params for run in counting.started] == [{"n": 1}, {"n": 0}]
    assert counting.metadata(first.id) == {"left": 2}
    assert counting.compensations(first.id) == []


@durableflow.workflow("testing.streams")
def streaming(ctx, params):
    ctx.stream("progress").write("started")
    count = ctx.step.stream("rows", "rows", ({"row": n} for n in range(3)))
    ctx.step.sleep("settle", 60)
    ctx.stream("progress").write(f"{count} rows")
    return count


def test_the_tester_shows_the_streams_a_run_wrote():
    tester = WorkflowTester()
    execution = tester.start("testing.streams")

    assert tester.run_until_finished(execution.id) == 3

    assert tester.streams(execution.id) == {
        "progress": ["started", "3 rows"],
        "rows": [{"row": 0}, {"row": 1}, {"row": 2}],
    }
