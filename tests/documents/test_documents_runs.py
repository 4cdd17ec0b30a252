"""Documents run by the engine, on both storages: states, transitions, traces, visit limits.

The documents come from an in-memory source (``MemoryDocuments``) on a registry of their
own; the executions are written by the storage under test.
"""

from __future__ import annotations

import pytest

from durableflow import DocumentError
from durableflow.documents.source import MemoryDocuments
from durableflow.registry import Registry
from tests.testapp import document_tasks


@pytest.fixture(autouse=True)
def _documents(request):
    """The test's harness runs the documents it saves in memory, over an empty registry."""
    if "backend" not in request.fixturenames:
        return
    harness = request.getfixturevalue("backend")
    harness.documents = MemoryDocuments(Registry())
    harness.engine.registry = Registry().layered(harness.documents)
    document_tasks.calls.clear()


def doc(initial, **states):
    return {"$workflow": "0.2", "initial": initial, "states": states}


def settle(backend, execution_id):
    """Deliver while the execution is runnable, without moving the clock: where it waits."""
    for _ in range(20):
        execution = backend.get(execution_id)
        if execution.status != "pending":
            return execution
        backend.deliver(execution_id)
    raise AssertionError(f"{execution_id} is still runnable")


def traces(backend, execution_id):
    return [r.value for r in backend.records(execution_id) if r.kind == "trace"]


def test_work_then_choose_then_final_returns_data(backend):
    backend.documents.save("d.total", doc(
        "total",
        total={"work": {"task": "t.total", "version": "1"}, "then": "check"},
        check={"choose": [{"guard": "data.total > `100`", "to": "big"}], "otherwise": "small"},
        big={"final": True},
        small={"final": True},
    ))  # fmt: skip
    execution_id = backend.start("d.total", {"id": 7, "items": [60, 50]})
    execution = backend.run(execution_id)
    assert execution.status == "completed"
    assert execution.result == {"id": 7, "total": 110}
    assert execution.version == "document-1"
    assert [(t["from"], t["to"], t["by"]) for t in traces(backend, execution_id)] == [
        (None, "total", "start"),
        ("total", "check", "then"),
        ("check", "big", "choose/0"),
    ]
    assert [(r.key, r.kind) for r in backend.records(execution_id) if r.kind != "trace"] == [("total@1", "run")]


def test_a_failing_task_takes_the_catch_branch_with_the_error_as_data(backend):
    backend.documents.save("d.catch", doc(
        "load",
        load={"work": {"task": "t.fail", "version": "1"}, "input": "input.id", "then": "done", "catch": "oops"},
        oops={"work": {"task": "t.echo", "version": "1"}, "input": "data.error", "then": "done"},
        done={"final": True},
    ))  # fmt: skip
    execution = backend.run(backend.start("d.catch", {"id": 3}))
    assert execution.status == "completed"
    assert execution.result == {"code": "STEP_FAILED", "message": "no such order: 3", "state": "load"}


def test_a_failing_task_without_catch_fails_the_run(backend):
    backend.documents.save("d.nocatch", doc(
        "load", load={"work": {"task": "t.fail", "version": "1"}, "then": "done"}, done={"final": True}
    ))  # fmt: skip
    execution = backend.run(backend.start("d.nocatch", 1))
    assert execution.status == "failed"
    assert execution.error["message"] == "no such order: 1"


def test_a_nested_flow_leaves_through_its_then(backend):
    backend.documents.save("d.flow", doc(
        "outer",
        outer={"flow": {"initial": "a", "states": {
            "a": {"work": {"task": "t.double", "version": "1"}, "then": "b"},
            "b": {"work": {"task": "t.double", "version": "1"}, "then": "end"},
            "end": {"final": True},
        }}, "then": "last"},
        last={"work": {"task": "t.double", "version": "1"}, "then": "done"},
        done={"final": True},
    ))  # fmt: skip
    execution_id = backend.start("d.flow", 1)
    assert backend.run(execution_id).result == 8
    assert [(t["from"], t["to"], t["by"]) for t in traces(backend, execution_id)] == [
        (None, "outer", "start"),
        ("outer", "outer/a", "flow"),
        ("outer/a", "outer/b", "then"),
        ("outer/b", "outer/end", "then"),
        ("outer/end", "last", "exit"),
        ("last", "done", "then"),
    ]
    assert [r.key for r in backend.records(execution_id) if r.kind == "run"] == ["outer/a@1", "outer/b@1", "last@1"]


def test_an_expression_that_fails_on_the_data_fails_the_run_naming_the_member(backend):
    backend.documents.save("d.bad-guard", doc(
        "check",
        check={"choose": [{"guard": "abs(data) > `1`", "to": "done"}], "otherwise": "done"},
        done={"final": True},
    ))  # fmt: skip
    execution = backend.run(backend.start("d.bad-guard", "not a number"))
    assert execution.status == "failed"
    assert execution.error["code"] == "EXPRESSION_FAILED"
    assert execution.error["detail"]["pointer"] == "/states/check/choose/0/guard"


def test_a_loop_runs_until_its_guard_and_counts_visits(backend):
    backend.documents.save("d.loop", doc(
        "step",
        step={"work": {"task": "t.double", "version": "1"}, "then": "check", "limit": 10},
        check={"choose": [{"guard": "data < `20`", "to": "step"}], "otherwise": "done"},
        done={"final": True},
    ))  # fmt: skip
    execution_id = backend.start("d.loop", 1)
    assert backend.run(execution_id).result == 32
    assert [r.key for r in backend.records(execution_id) if r.kind == "run"] == [f"step@{n}" for n in range(1, 6)]
    assert document_tasks.calls == {"t.double": 5}


def test_exceeding_a_limit_fails_the_run_naming_the_state(backend):
    backend.documents.save("d.limited", doc(
        "step",
        step={"work": {"task": "t.double", "version": "1"}, "then": "check", "limit": 3},
        check={"choose": [{"guard": "data < `1000`", "to": "step"}], "otherwise": "done"},
        done={"final": True},
    ))  # fmt: skip
    execution = backend.run(backend.start("d.limited", 1))
    assert execution.status == "failed"
    assert execution.error["code"] == "VISIT_LIMIT_EXCEEDED"
    assert "state 'step' was entered 4 times, over its limit of 3" in execution.error["message"]
    assert document_tasks.calls == {"t.double": 3}


def test_a_replayed_run_runs_no_task_twice_and_writes_no_trace_twice(backend):
    backend.documents.save("d.sleepy", doc(
        "a",
        a={"work": {"task": "t.double", "version": "1"}, "then": "pause"},
        pause={"on": [], "after": {"ms": 5000, "to": "b"}},
        b={"work": {"task": "t.double", "version": "1"}, "then": "done"},
        done={"final": True},
    ))  # fmt: skip
    execution_id = backend.start("d.sleepy", 1)
    assert backend.deliver(execution_id) == "suspended"
    assert backend.run(execution_id).result == 4
    assert document_tasks.calls == {"t.double": 2}
    assert [t["to"] for t in traces(backend, execution_id)] == ["a", "pause", "b", "done"]


def test_a_dag_runs_its_waves_and_its_output_collects_its_inputs(backend):
    backend.documents.save("d.dag", doc(
        "work",
        work={"work": {"dag": {"$dag": "0.1", "nodes": {
            "in": {"kind": "input"},
            "twice": {"kind": "task", "task": "t.double", "version": "1", "checkpoint": True},
            "same": {"kind": "task", "task": "t.echo", "version": "1", "with": "input"},
            "out": {"kind": "output"},
        }, "edges": [{"from": "in", "to": "twice"}, {"from": "twice", "to": "same"},
                     {"from": "same", "to": "out"}]}}, "then": "done"},
        done={"final": True},
    ))  # fmt: skip
    execution_id = backend.start("d.dag", 21)
    assert backend.run(execution_id).result == 21  # "same" reads the work's input, not "twice"
    nodes = [(t["node"], t["checkpoint"]) for t in traces(backend, execution_id) if t["type"] == "node"]
    assert nodes == [("twice", True), ("same", False)]
    assert [r.key for r in backend.records(execution_id) if r.kind == "run"] == ["work@1/twice", "work@1/same"]


def test_an_invalid_document_is_not_kept():
    documents = MemoryDocuments(Registry())
    with pytest.raises(DocumentError) as refused:
        documents.save("d.bad", doc("nowhere", done={"final": True}))
    assert (refused.value.code, refused.value.pointer) == ("UNDECLARED_STATE", "/initial")
    assert documents.get("d.bad") is None


def test_a_run_keeps_its_revision_when_the_document_changes(backend):
    first = doc("a", a={"work": {"task": "t.echo", "version": "1"}, "then": "pause"},
                pause={"on": [], "after": {"ms": 1000, "to": "done"}}, done={"final": True})  # fmt: skip
    backend.documents.save("d.edited", first)
    execution_id = backend.start("d.edited", "x")
    backend.deliver(execution_id)  # echo ran; sleeping
    second = doc("a", a={"work": {"task": "t.echo", "version": "2"}, "then": "done"}, done={"final": True})
    assert backend.documents.save("d.edited", second) == 2
    assert backend.run(execution_id).result == "x"  # revision 1 to the end
    assert backend.get(execution_id).version == "document-1"
    newer = backend.run(backend.start("d.edited", "y"))
    assert (newer.result, newer.version) == ({"v2": "y"}, "document-2")


def test_saving_the_same_document_again_keeps_its_revision():
    documents = MemoryDocuments(Registry())
    document = doc("done", done={"final": True})
    assert documents.save("d.same", document) == 1
    assert documents.save("d.same", document) == 1


def test_traces_lost_with_a_delivery_are_written_by_the_next(backend, monkeypatch):
    from durableflow.documents.interpreter import Tracer

    backend.documents.save("d.lost-traces", doc(
        "a",
        a={"work": {"task": "t.double", "version": "1"}, "then": "pause"},
        pause={"on": [], "after": {"ms": 1000, "to": "done"}},
        done={"final": True},
    ))  # fmt: skip
    execution_id = backend.start("d.lost-traces", 1)
    with monkeypatch.context() as patch:
        patch.setattr(Tracer, "flush", lambda self: None)  # as if the worker died before writing them
        backend.deliver(execution_id)
    assert traces(backend, execution_id) == []
    assert backend.run(execution_id).result == 2
    assert [(t["from"], t["to"]) for t in traces(backend, execution_id)] == [
        (None, "a"), ("a", "pause"), ("pause", "done"),
    ]  # fmt: skip
    assert [r.key for r in backend.records(execution_id) if r.kind == "trace"] == ["$trace:1", "$trace:2", "$trace:3"]
    assert document_tasks.calls == {"t.double": 1}


# on: events and delays --------------------------------------------------------------------------


def approval(**on_state):
    return doc(
        "total",
        total={"work": {"task": "t.total", "version": "1"}, "then": "check"},
        check={"choose": [{"guard": "data.total > `100`", "to": "approve"}], "otherwise": "done"},
        approve=on_state,
        done={"final": True},
        rejected={"final": True},
        expired={"final": True},
    )


ORDER = {"id": 7, "items": [80, 40]}


def test_an_event_moves_an_on_state_and_becomes_event(backend):
    backend.documents.save("d.event", approval(
        on=[{"event": "order.approved", "to": "done"}], after={"ms": 60_000, "to": "expired"},
    ))  # fmt: skip
    execution_id = backend.start("d.event", ORDER)
    execution = settle(backend, execution_id)
    assert (execution.status, execution.waiting_for["event_type"]) == ("waiting", "order.approved")
    assert backend.send_event("order.approved", {"by": "ann"}) == 1
    assert backend.run(execution_id).result == {"id": 7, "total": 120}
    last = traces(backend, execution_id)[-1]
    assert (last["from"], last["to"], last["by"]) == ("approve", "done", "on/0")


def test_the_after_branch_is_taken_when_no_event_comes(backend):
    backend.documents.save("d.after", approval(
        on=[{"event": "order.approved", "to": "done"}], after={"ms": 5000, "to": "expired"},
    ))  # fmt: skip
    execution_id = backend.start("d.after", ORDER)
    execution = backend.run(execution_id)  # moves the clock over the wait's deadline
    assert execution.status == "completed"
    assert traces(backend, execution_id)[-1]["by"] == "after"
    wait = next(r for r in backend.records(execution_id) if r.kind == "event")
    assert (wait.key, wait.status, wait.error["code"]) == ("approve@1", "failed", "WAIT_TIMEOUT")


def test_guards_pick_the_branch_and_an_event_no_guard_takes_is_ignored(backend):
    backend.documents.save("d.guards", approval(
        on=[
            {"event": "order.decided", "guard": "event.payload.id == data.id && event.payload.ok", "to": "done"},
            {"event": "order.decided", "guard": "event.payload.id == data.id", "to": "rejected"},
        ],
        after={"ms": 60_000, "to": "expired"},
    ))  # fmt: skip
    execution_id = backend.start("d.guards", ORDER)
    settle(backend, execution_id)
    backend.send_event("order.decided", {"id": 8, "ok": True})  # another order's: no guard holds
    execution = settle(backend, execution_id)
    assert (execution.status, execution.waiting_for["step"]) == ("waiting", "approve@1#2")
    backend.send_event("order.decided", {"id": 7, "ok": False})
    assert settle(backend, execution_id).status == "completed"
    assert traces(backend, execution_id)[-1]["to"] == "rejected"


def test_a_second_wait_keeps_the_first_wait_s_deadline(backend):
    backend.documents.save("d.deadline", approval(
        on=[{"event": "order.decided", "guard": "event.payload.ok", "to": "done"}],
        after={"ms": 10_000, "to": "expired"},
    ))  # fmt: skip
    execution_id = backend.start("d.deadline", ORDER)
    first = settle(backend, execution_id).wake_at
    backend.advance(4)
    backend.send_event("order.decided", {"ok": False})
    # The same deadline, give or take the moments between two reads of the clock.
    assert abs((settle(backend, execution_id).wake_at - first).total_seconds()) < 0.05
    assert backend.run(execution_id).status == "completed"
    assert traces(backend, execution_id)[-1]["to"] == "expired"


def test_an_on_state_with_several_event_types_takes_the_earliest(backend):
    backend.documents.save("d.any", approval(
        on=[{"event": "order.approved", "to": "done"}, {"event": "order.rejected", "to": "rejected"}],
        after={"ms": 60_000, "to": "expired"},
    ))  # fmt: skip
    execution_id = backend.start("d.any", ORDER)
    settle(backend, execution_id)
    assert backend.get(execution_id).waiting_for["event_types"] == ["order.approved", "order.rejected"]
    assert backend.send_event("order.rejected", {"why": "no stock"}) == 1
    execution = settle(backend, execution_id)
    assert execution.status == "completed"
    assert traces(backend, execution_id)[-1]["to"] == "rejected"
    wait = next(r for r in backend.records(execution_id) if r.kind == "event")
    assert wait.value == {"event": "order.rejected", "payload": {"why": "no stock"}}
    # The other type's waiter is closed: a later event of it wakes nothing.
    assert backend.send_event("order.approved", {}) == 0


def test_events_published_before_the_on_state_are_seen_in_order(backend):
    backend.documents.save("d.early", doc(
        "pause",
        pause={"on": [], "after": {"ms": 1000, "to": "approve"}},
        approve={"on": [{"event": "b", "to": "got-b"}, {"event": "a", "to": "got-a"}]},
        **{"got-a": {"final": True}, "got-b": {"final": True}},
    ))  # fmt: skip
    execution_id = backend.start("d.early", None)
    backend.deliver(execution_id)  # sleeping in "pause"
    backend.send_event("a", 1)
    backend.send_event("b", 2)
    assert backend.run(execution_id).status == "completed"
    assert traces(backend, execution_id)[-1]["to"] == "got-a"  # the earliest published


def test_the_several_types_timeout_closes_every_waiter(backend):
    backend.documents.save("d.any-timeout", approval(
        on=[{"event": "x.one", "to": "done"}, {"event": "x.two", "to": "rejected"}],
        after={"ms": 2000, "to": "expired"},
    ))  # fmt: skip
    execution_id = backend.start("d.any-timeout", ORDER)
    assert backend.run(execution_id).status == "completed"
    assert traces(backend, execution_id)[-1]["to"] == "expired"
    assert backend.send_event("x.one", {}) == backend.send_event("x.two", {}) == 0


# DAG work with concurrent nodes -------------------------------------------------------------------


def test_a_wave_of_several_nodes_runs_as_one_map(backend):
    backend.documents.save("d.wave", doc(
        "work",
        work={"work": {"dag": {"$dag": "0.1", "nodes": {
            "in": {"kind": "input"},
            "a": {"kind": "task", "task": "t.double", "version": "1", "checkpoint": True},
            "b": {"kind": "task", "task": "t.echo", "version": "1"},
            "sum": {"kind": "task", "task": "t.add", "version": "1"},
            "out": {"kind": "output", "with": "{sum: nodes.sum}"},
        }, "edges": [{"from": "in", "to": "a"}, {"from": "in", "to": "b"}, {"from": "a", "to": "sum"},
                     {"from": "b", "to": "sum"}, {"from": "sum", "to": "out"}]}}, "then": "done"},
        done={"final": True},
    ))  # fmt: skip
    execution_id = backend.start("d.wave", 5)
    assert backend.run(execution_id).result == {"sum": 15}
    kinds = [(r.key, r.kind) for r in backend.records(execution_id) if r.kind in ("map", "item", "run")]
    assert sorted(kinds) == [("work@1/sum", "run"), ("work@1/wave-1", "map"), ("work@1/wave-1[0]", "item"),
                             ("work@1/wave-1[1]", "item")]  # fmt: skip
    nodes = [t["node"] for t in traces(backend, execution_id) if t["type"] == "node"]
    assert nodes == ["a", "b", "sum"]


def test_a_failing_node_takes_the_catch_branch_naming_the_node(backend):
    backend.documents.save("d.wave-fails", doc(
        "work",
        work={"work": {"dag": {"$dag": "0.1", "nodes": {
            "in": {"kind": "input"},
            "ok": {"kind": "task", "task": "t.echo", "version": "1"},
            "bad": {"kind": "task", "task": "t.fail", "version": "1"},
            "out": {"kind": "output"},
        }, "edges": [{"from": "in", "to": "ok"}, {"from": "in", "to": "bad"}, {"from": "ok", "to": "out"},
                     {"from": "bad", "to": "out"}]}}, "then": "done", "catch": "failed"},
        done={"final": True},
        failed={"final": True},
    ))  # fmt: skip
    execution_id = backend.start("d.wave-fails", 3)
    result = backend.run(execution_id).result
    assert result["error"]["node"] == "bad" and result["error"]["state"] == "work"
    assert traces(backend, execution_id)[-1]["to"] == "failed"


def test_a_worker_without_the_task_stalls_the_run_until_it_has_it(backend):
    from durableflow.documents.tasks import tasks

    backend.documents.save("d.missing-task", doc(
        "a", a={"work": {"task": "t.echo", "version": "1"}, "then": "done"}, done={"final": True},
    ))  # fmt: skip
    execution_id = backend.start("d.missing-task", "x")
    task = tasks.get("t.echo", "1")
    tasks.unregister("t.echo", "1")  # as on a worker the deploy has not reached yet
    try:
        backend.deliver(execution_id)
    finally:
        tasks.register(task)
    stalled = backend.get(execution_id)
    assert (stalled.status, stalled.waiting_for["kind"], stalled.waiting_for["reason"]) == (
        "waiting", "stalled", "UNKNOWN_TASK",
    )  # fmt: skip
    backend.retry(execution_id)
    assert backend.run(execution_id).result == "x"
