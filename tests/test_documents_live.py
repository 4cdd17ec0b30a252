"""Workflow documents on real worker processes: started by name, run to the end by the
engine, each invariant counted from database rows."""

from __future__ import annotations

import pytest

import durableflow
from durableflow import operations
from durableflow.models import StepRecord
from tests.helpers import uid, wait_status
from tests.testapp.models import Marker

pytestmark = pytest.mark.integration


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
