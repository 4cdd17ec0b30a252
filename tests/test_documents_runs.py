"""Documents run by the engine, on both storages: states, transitions, traces, visit limits.

The documents come from an in-memory source (``MemoryDocuments``) on a registry of their
own; the executions are written by the storage under test.
"""

from __future__ import annotations

import pytest

from durableflow import DocumentError
from durableflow.documents.source import MemoryDocuments
from durableflow.registry import Registry
from tests.harness import MemoryHarness, OrmHarness
from tests.testapp import document_tasks


@pytest.fixture(params=["memory", "orm"])
def backend(request):
    if request.param == "memory":
        harness = MemoryHarness()
    else:
        request.getfixturevalue("db")
        harness = OrmHarness()
    harness.documents = MemoryDocuments(Registry())
    harness.engine.registry = Registry().layered(harness.documents)
    document_tasks.calls.clear()
    yield harness
    harness.close()


def doc(initial, **states):
    return {"$workflow": "0.2", "initial": initial, "states": states}


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
