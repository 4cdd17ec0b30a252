"""Workflow documents on real worker processes: started by name, run to the end by the
engine, each invariant counted from database rows."""

from __future__ import annotations

import signal

import durableflow
from durableflow import operations
from durableflow.models import Execution, StepRecord
from tests.helpers import uid, wait_for, wait_status
from tests.testapp.models import Marker


def document(initial: str, **states) -> dict:
    return {"$workflow": "0.2", "initial": initial, "states": states}


def mark(tag: str, then: str, **more) -> dict:
    """A work state running ``t.mark`` with ``{"tag": tag, "value": data}``."""
    return {"work": {"task": "t.mark", "version": "1", "with": f"{{tag: '{tag}', value: input}}"}, "then": then,
            **more}  # fmt: skip


def saved(doc: dict) -> str:
    name = uid("doc")
    operations.save_document(name, doc)
    return name


def traces(execution_id: str) -> list[dict]:
    rows = StepRecord.objects.filter(execution_id=execution_id, kind="trace").order_by("id")
    return [row.value for row in rows]


def test_work_then_choose_then_final_on_a_worker(cluster, live_db):
    tag = uid("choose")
    name = saved(document(
        "load",
        load=mark(tag, "check"),
        check={"choose": [{"guard": "data.total > `100`", "to": "big"}], "otherwise": "small"},
        big={"final": True},
        small={"final": True},
    ))  # fmt: skip
    execution = durableflow.start(name, {"total": 150})
    done = wait_status(execution.id)
    assert done.result == {"total": 150}
    assert Marker.count(tag) == 1
    assert [(t["from"], t["to"]) for t in traces(execution.id)] == [(None, "load"), ("load", "check"), ("check", "big")]


def test_a_failing_task_takes_the_catch_branch_on_a_worker(cluster, live_db):
    tag = uid("caught")
    name = saved(document(
        "load",
        load={"work": {"task": "t.fail", "version": "1"}, "then": "done", "catch": "recover"},
        recover=mark(tag, "done"),
        done={"final": True},
    ))  # fmt: skip
    done = wait_status(durableflow.start(name, 7).id)
    assert done.result == {"error": {"code": "STEP_FAILED", "message": "no such order: 7", "state": "load"}}
    assert Marker.count(tag) == 1


def test_a_nested_flow_on_a_worker(cluster, live_db):
    tag = uid("nested")
    name = saved(document(
        "outer",
        outer={"flow": {"initial": "a", "states": {
            "a": mark(f"{tag}:a", "inner"),
            "inner": {"flow": {"initial": "b", "states": {"b": mark(f"{tag}:b", "end"), "end": {"final": True}}},
                      "then": "end"},
            "end": {"final": True},
        }}, "then": "last"},
        last=mark(f"{tag}:last", "done"),
        done={"final": True},
    ))  # fmt: skip
    execution = durableflow.start(name, "x")
    assert wait_status(execution.id).result == "x"
    assert [Marker.count(f"{tag}:{s}") for s in ("a", "b", "last")] == [1, 1, 1]
    assert [t["to"] for t in traces(execution.id)] == [
        "outer", "outer/a", "outer/inner", "outer/inner/b", "outer/inner/end", "outer/end", "last", "done",
    ]  # fmt: skip


def test_exceeding_a_limit_fails_the_run_naming_the_state_on_a_worker(cluster, live_db):
    tag = uid("limit")
    name = saved(document(
        "step",
        step={**mark(tag, "again"), "limit": 3},
        again={"choose": [{"guard": "`true`", "to": "step"}], "otherwise": "done"},
        done={"final": True},
    ))  # fmt: skip
    failed = wait_status(durableflow.start(name, 1).id, status="failed")
    assert failed.error["code"] == "VISIT_LIMIT_EXCEEDED"
    assert "state 'step' was entered 4 times, over its limit of 3" in failed.error["message"]
    assert Marker.count(tag) == 3


def test_a_running_execution_keeps_its_revision_after_the_document_is_edited(cluster, live_db):
    tag = uid("pinned")
    first = document(
        "before",
        before=mark(f"{tag}:r1-before", "pause"),
        pause={"on": [], "after": {"ms": 1500, "to": "after"}},
        after=mark(f"{tag}:r1-after", "done"),
        done={"final": True},
    )
    name = saved(first)
    execution = durableflow.start(name, "x")
    wait_status(execution.id, status="waiting")  # in its pause, on revision 1
    second = document("only", only=mark(f"{tag}:r2", "done"), done={"final": True})
    row, created = operations.save_document(name, second)
    assert (row.revision, created) == (2, True)

    done = wait_status(execution.id, timeout=60)
    assert (done.version, done.result) == ("document-1", "x")
    assert Marker.count(f"{tag}:r1-after") == 1 and Marker.count(f"{tag}:r2") == 0
    newer = wait_status(durableflow.start(name, "y").id)
    assert newer.version == "document-2"
    assert Marker.count(f"{tag}:r2") == 1


def test_work_choose_on_an_event_final_driven_by_send_event(cluster, live_db):
    tag = uid("event")
    name = saved(document(
        "total",
        total={"work": {"task": "t.total", "version": "1"}, "then": "check"},
        check={"choose": [{"guard": "data.total > `100`", "to": "approve"}], "otherwise": "ship"},
        approve={"on": [{"event": "doc.approved", "guard": f"event.payload.tag == '{tag}'", "to": "ship"}],
                 "after": {"ms": 600_000, "to": "expired"}},
        ship=mark(tag, "done"),
        done={"final": True},
        expired={"final": True},
    ))  # fmt: skip
    execution = durableflow.start(name, {"id": 3, "items": [90, 30]})
    waiting = wait_status(execution.id, status="waiting")
    assert waiting.waiting_for["event_type"] == "doc.approved"
    assert Marker.count(tag) == 0

    assert durableflow.send_event("doc.approved", {"tag": tag}) == 1
    done = wait_status(execution.id)
    assert done.result == {"id": 3, "total": 120}
    assert Marker.count(tag) == 1
    assert [(t["from"], t["to"], t["by"]) for t in traces(execution.id)][-2:] == [
        ("approve", "ship", "on/0"),
        ("ship", "done", "then"),
    ]


def test_the_after_branch_is_taken_on_timeout_on_a_worker(cluster, live_db):
    tag = uid("expired")
    name = saved(document(
        "approve",
        approve={"on": [{"event": "doc.never", "to": "done"}], "after": {"ms": 1500, "to": "expired"}},
        expired=mark(tag, "done"),
        done={"final": True},
    ))  # fmt: skip
    execution = durableflow.start(name, "late")
    done = wait_status(execution.id, timeout=60)  # woken by beat's sweep at the deadline
    assert done.result == "late"
    assert Marker.count(tag) == 1
    assert traces(execution.id)[-2]["by"] == "after"
    wait = StepRecord.objects.get(execution_id=execution.id, kind="event")
    assert (wait.status, wait.error["code"]) == ("failed", "WAIT_TIMEOUT")


def test_a_checkpointed_dag_node_runs_once_when_a_worker_is_killed(workers, live_db, tmp_path):
    """Six nodes, two branches: a1 → a2 and b1 → b2 between the input and the output. The
    worker is SIGKILLed while b1 holds, after a1 (checkpointed) finished; another worker
    finishes the run, and a1's task has run once."""
    queue, tag = uid("q"), uid("dag")
    release = tmp_path / "release"

    def node(task: str, label: str, checkpoint: bool = False) -> dict:
        return {"kind": "task", "task": task, "version": "1", "checkpoint": checkpoint,
                "with": f"{{tag: '{tag}:{label}', value: input, release: '{release}'}}"}  # fmt: skip

    name = saved(document(
        "work",
        work={"work": {"dag": {"$dag": "0.1", "nodes": {
            "in": {"kind": "input"},
            "a1": node("t.mark", "a1", checkpoint=True),
            "a2": node("t.mark", "a2"),
            "b1": node("t.hold", "b1", checkpoint=True),
            "b2": node("t.mark", "b2"),
            "out": {"kind": "output", "with": "nodes"},
        }, "edges": [{"from": "in", "to": "a1"}, {"from": "a1", "to": "a2"}, {"from": "in", "to": "b1"},
                     {"from": "b1", "to": "b2"}, {"from": "a2", "to": "out"}, {"from": "b2", "to": "out"}]}},
              "then": "done"},
        done={"final": True},
    ))  # fmt: skip
    first = workers(queue, concurrency=2)
    execution = durableflow.start(name, 1, queue=queue)
    # a1 recorded (its item completed), b1 holding on the same worker.
    a1 = StepRecord.objects.filter(execution_id=execution.id, key="work@1/wave-1[0]", status="completed")
    wait_for(a1.exists, timeout=60, what="a1 to finish")
    wait_for(lambda: Marker.count(f"{tag}:b1") == 1, timeout=60, what="b1 to start")

    first.kill(signal.SIGKILL)
    release.touch()
    workers(queue, concurrency=2)
    done = wait_status(execution.id, timeout=120)

    assert done.result == {"a2": 1, "b2": 1}
    assert Marker.count(f"{tag}:a1") == 1  # the checkpointed node never ran again
    assert Marker.count(f"{tag}:b1") == 2  # the killed attempt, then the one that finished
    assert [Marker.count(f"{tag}:{n}") for n in ("a2", "b2")] == [1, 1]
    nodes = [t["node"] for t in traces(execution.id) if t["type"] == "node"]
    assert nodes == ["a1", "b1", "a2", "b2"]
    assert Execution.objects.get(pk=execution.id).version == "document-1"
