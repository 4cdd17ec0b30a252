"""``ctx.metadata``: changes applied once with their journal record, on self, parent or root."""

from __future__ import annotations

import pytest

import durableflow
from durableflow import WorkflowValueError
from tests.harness import LEASE_SECONDS


class Crash(BaseException):
    """The worker dies: nothing catches it."""


crashes: list[str] = []


@pytest.fixture(autouse=True)
def _reset():
    crashes.clear()


def crash_once(tag: str):
    if tag not in crashes:
        crashes.append(tag)
        raise Crash(tag)
    return tag


@durableflow.workflow("meta.progress")
def progress_wf(ctx, params):
    ctx.metadata.set("stage", "start")
    first = ctx.metadata.increment("done")
    ctx.metadata.append("log", {"step": 1})
    ctx.step.sleep("pause", 5)
    second = ctx.metadata.increment("done", by=2.5)
    ctx.metadata.append("log", {"step": 2})
    ctx.metadata.remove("stage")
    return [first, second]


def test_changes_apply_once_although_the_workflow_replays(backend):
    execution_id = backend.start("meta.progress")
    backend.deliver(execution_id)
    assert backend.get(execution_id).metadata == {"stage": "start", "done": 1, "log": [{"step": 1}]}

    done = backend.run(execution_id)  # replays the first three changes: nothing applied twice

    assert done.result == [1, 3.5]
    assert done.metadata == {"done": 3.5, "log": [{"step": 1}, {"step": 2}]}
    keys = [r.key for r in backend.records(execution_id) if r.kind == "metadata"]
    assert keys == [f"$metadata:{n}" for n in range(1, 7)]


@durableflow.workflow("meta.crashy")
def crashy_wf(ctx, params):
    ctx.metadata.increment("done", target=params.get("target", "self"))
    ctx.step.run("after", crash_once, "after")  # dies once, after the change committed
    return "ok"


def test_a_change_committed_before_a_crash_is_not_applied_again(backend):
    execution_id = backend.start("meta.crashy", {})
    with pytest.raises(Crash):
        backend.deliver(execution_id)
    backend.advance(LEASE_SECONDS + 1)

    assert backend.run(execution_id).result == "ok"
    assert backend.get(execution_id).metadata == {"done": 1}


@durableflow.workflow("meta.child")
def meta_child_wf(ctx, params):
    ctx.metadata.increment("done", target="parent")
    ctx.metadata.append("seen", params["n"], target="root")
    if params.get("crash"):
        ctx.step.run("after", crash_once, f"child-{params['n']}")
    return params["n"]


@durableflow.workflow("meta.parent")
def meta_parent_wf(ctx, params):
    ids = [ctx.step.start(f"start-{n}", "meta.child", {"n": n, "crash": n % 2 == 0}) for n in range(params["n"])]
    return [ctx.step.wait_for_execution(f"wait-{n}", pk) for n, pk in enumerate(ids)]


def test_children_count_on_their_parent_once_each_even_when_they_crash_and_replay(backend):
    parent = backend.start("meta.parent", {"n": 10})
    backend.deliver(parent)
    children = [r.value for r in backend.records(parent) if r.kind == "start"]
    for child in children:
        try:
            backend.deliver(child)
        except Crash:
            pass  # half of them die after counting
    backend.advance(LEASE_SECONDS + 1)
    for child in children:
        backend.run(child)

    done = backend.run(parent)

    assert done.result == list(range(10))
    assert done.metadata["done"] == 10
    assert sorted(done.metadata["seen"]) == list(range(10))
    assert [backend.get(child).metadata for child in children] == [{}] * 10


@durableflow.workflow("meta.bad")
def bad_wf(ctx, params):
    ctx.metadata.set("name", "text")
    outcomes = []
    for change in (
        lambda: ctx.metadata.increment("name"),
        lambda: ctx.metadata.append("name", 1),
    ):
        try:
            change()
        except WorkflowValueError as exc:
            outcomes.append(exc.code)
    ctx.step.sleep("pause", 1)
    return outcomes


def test_a_change_that_does_not_fit_is_recorded_and_raised_on_every_replay(backend):
    execution_id = backend.start("meta.bad")

    done = backend.run(execution_id)

    assert done.result == ["INVALID_METADATA", "INVALID_METADATA"]
    assert done.metadata == {"name": "text"}
    statuses = [r.status for r in backend.records(execution_id) if r.kind == "metadata"]
    assert statuses == ["completed", "failed", "failed"]


@durableflow.workflow("meta.invalid")
def invalid_wf(ctx, params):
    return getattr(ctx.metadata, params["op"])(*params["args"], **params.get("kwargs", {}))


@pytest.mark.parametrize(
    "op, args, kwargs",
    [
        ("set", ["k", 1], {"target": "parent"}),  # no parent
        ("set", ["k", 1], {"target": "sibling"}),
        ("set", ["", 1], {}),
        ("remove", ["x" * 201], {}),
    ],
)
def test_invalid_changes_are_refused_with_a_code(backend, op, args, kwargs):
    execution_id = backend.start("meta.invalid", {"op": op, "args": args, "kwargs": kwargs})

    done = backend.run(execution_id)

    assert (done.status, done.error["code"]) == ("failed", "INVALID_METADATA")
    assert backend.records(execution_id) == []


@durableflow.workflow("meta.not-durable")
def not_durable_wf(ctx, params):
    ctx.metadata.set("when", {1, 2})


def test_a_value_that_is_not_durable_is_refused(backend):
    execution_id = backend.start("meta.not-durable")

    done = backend.run(execution_id)

    assert (done.error["code"], done.error["detail"]) == ("INVALID_METADATA", {"path": "/"})


@durableflow.workflow("meta.forked")
def forked_wf(ctx, params):
    ctx.metadata.increment("steps")
    ctx.step.run("a", lambda: "a")
    ctx.metadata.increment("steps")
    ctx.step.run("b", lambda: "b")
    ctx.metadata.increment("steps")
    return "done"


def test_a_fork_starts_with_the_metadata_its_kept_journal_wrote(backend):
    execution_id = backend.start("meta.forked")
    assert backend.run(execution_id).metadata == {"steps": 3}

    fork = backend.fork(execution_id, from_step="b")
    assert fork.metadata == {"steps": 2}

    assert backend.run(fork.id).metadata == {"steps": 3}


@durableflow.workflow("meta.by-text")
def by_text_wf(ctx, params):
    ctx.metadata.increment("n", by="1")


def test_increment_takes_a_number(backend):
    execution_id = backend.start("meta.by-text")
    done = backend.run(execution_id)
    assert "finite number" in done.error["message"]
