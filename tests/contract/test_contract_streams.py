"""Streams: chunks numbered by position, stored once, resumed after a crash, read in order."""

from __future__ import annotations

import pytest

import durableflow
from durableflow import ExecutionNotFound, WorkflowValueError
from durableflow.engine.records import LeaseLost
from durableflow.engine.streams import READ_LIMIT
from tests.harness import LEASE_SECONDS


class Crash(BaseException):
    """The worker dies: nothing catches it."""


crashes: list[str] = []
iterated: list[int] = []


@pytest.fixture(autouse=True)
def _reset():
    crashes.clear()
    iterated.clear()


def chunks(backend, execution_id, stream_id, after=0):
    return [(c["seq"], c["chunk"]) for c in backend.engine.read_stream(execution_id, stream_id, after)["chunks"]]


@durableflow.workflow("streams.lines")
def lines_wf(ctx, params):
    log = ctx.stream("log")
    first = log.write("one")
    ctx.step.sleep("pause", 5)
    second = ctx.stream("log").write({"n": 2})
    ctx.stream("other").write("elsewhere")
    return [first, second]


def test_writes_are_numbered_and_a_replay_stores_none_again(backend):
    execution_id = backend.start("streams.lines")
    backend.deliver(execution_id)
    assert chunks(backend, execution_id, "log") == [(1, "one")]
    assert backend.engine.read_stream(execution_id, "log")["done"] is False

    done = backend.run(execution_id)  # replays the first write: nothing stored twice

    assert done.result == [1, 2]
    assert chunks(backend, execution_id, "log") == [(1, "one"), (2, {"n": 2})]
    assert chunks(backend, execution_id, "log", after=1) == [(2, {"n": 2})]
    assert chunks(backend, execution_id, "other") == [(1, "elsewhere")]
    assert backend.engine.stream_ids(execution_id) == {"log": 2, "other": 1}
    read = backend.engine.read_stream(execution_id, "log", after=2)
    assert read == {"chunks": [], "done": True}
    assert not [r for r in backend.records(execution_id) if r.kind == "stream"]  # writes are no steps


def produce(n: int, crash_at: int | None = None):
    for i in range(1, n + 1):
        iterated.append(i)
        if i == crash_at and not crashes:  # the worker dies once, while item i is made
            crashes.append(f"item-{i}")
            raise Crash(i)
        yield f"token {i}"


@durableflow.workflow("streams.step")
def step_wf(ctx, params):
    ctx.stream("out").write("header")
    count = ctx.step.stream("tokens", "out", produce(params["n"], params.get("crash_at")))
    ctx.step.sleep("pause", 5)
    ctx.stream("out").write("footer")
    return count


def test_a_completed_stream_step_is_not_iterated_again(backend):
    execution_id = backend.start("streams.step", {"n": 5})
    backend.deliver(execution_id)
    assert iterated == [1, 2, 3, 4, 5]

    done = backend.run(execution_id)

    assert done.result == 5
    assert iterated == [1, 2, 3, 4, 5]  # the replay returned the count
    assert [seq for seq, _ in chunks(backend, execution_id, "out")] == list(range(1, 8))
    assert chunks(backend, execution_id, "out")[-1] == (7, "footer")
    (record,) = [r for r in backend.records(execution_id) if r.kind == "stream"]
    assert (record.key, record.value, record.meta) == ("tokens", 5, {"stream": "out", "first": 2})


def test_a_stream_that_crashed_resumes_after_its_last_stored_chunk(backend):
    execution_id = backend.start("streams.step", {"n": 10, "crash_at": 6})
    with pytest.raises(Crash):
        backend.deliver(execution_id)
    assert [seq for seq, _ in chunks(backend, execution_id, "out")] == [1, 2, 3, 4, 5, 6]  # 5 items stored
    backend.advance(LEASE_SECONDS + 1)

    done = backend.run(execution_id)

    assert done.result == 10
    stored = chunks(backend, execution_id, "out")
    assert [seq for seq, _ in stored] == list(range(1, 13))
    assert [chunk for _, chunk in stored] == ["header", *(f"token {i}" for i in range(1, 11)), "footer"]


def test_a_zombie_delivery_cannot_write_a_chunk(backend):
    execution_id = backend.start("streams.lines")
    zombie = backend.journal(execution_id)
    assert zombie.claim() is not None
    backend.advance(LEASE_SECONDS + 1)
    backend.deliver(execution_id)  # a new delivery takes the lease and writes chunk 1

    with pytest.raises(LeaseLost):
        zombie.write_chunk("log", 2, "late")

    assert chunks(backend, execution_id, "log") == [(1, "one")]


@durableflow.workflow("streams.bad")
def bad_wf(ctx, params):
    codes = []
    for write in (
        lambda: ctx.stream("").write("x"),
        lambda: ctx.stream("s" * 201).write("x"),
        lambda: ctx.stream("ok").write(float("nan")),
        lambda: ctx.stream("ok").write("x" * 2_000_000),
        lambda: ctx.step.run("body", lambda: ctx.stream("ok").write("inside")),
    ):
        try:
            write()
        except WorkflowValueError as exc:
            codes.append(exc.code)
    ctx.stream("ok").write("fine")
    return codes


def test_bad_writes_raise_a_code_and_store_nothing(backend):
    execution_id = backend.start("streams.bad")

    done = backend.run(execution_id)

    assert done.result == ["INVALID_STREAM", "INVALID_STREAM", "INVALID_STREAM", "PAYLOAD_TOO_LARGE", "NESTED_STEP"]
    assert backend.engine.stream_ids(execution_id) == {"ok": 1}


def test_reads_are_bounded_and_refuse_bad_arguments(backend):
    execution_id = backend.start("streams.lines")
    backend.run(execution_id)

    page = backend.engine.read_stream(execution_id, "log", limit=1)
    assert [(c["seq"], c["chunk"]) for c in page["chunks"]] == [(1, "one")]
    assert page["done"] is False  # finished, but a chunk is left after this page
    assert backend.engine.read_stream(execution_id, "never written") == {"chunks": [], "done": True}
    with pytest.raises(ValueError, match="after"):
        backend.engine.read_stream(execution_id, "log", after=-1)
    with pytest.raises(ValueError, match="limit"):
        backend.engine.read_stream(execution_id, "log", limit=READ_LIMIT + 1)
    with pytest.raises(WorkflowValueError, match="stream id"):
        backend.engine.read_stream(execution_id, "")
    with pytest.raises(ExecutionNotFound):
        backend.engine.read_stream("no-such-run", "log")


def test_chunks_go_with_their_execution_when_it_is_pruned(backend):
    from datetime import timedelta

    execution_id = backend.start("streams.lines")
    backend.run(execution_id)
    backend.advance(3600)

    assert backend.engine.prune(timedelta(minutes=1)) >= 1

    assert backend.storage.chunks(execution_id, "log", 0, 10) == []
    assert backend.storage.stream_ids(execution_id) == {}
