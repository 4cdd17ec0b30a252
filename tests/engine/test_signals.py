"""Signals: what the engine announces after each commit, and the Django signals sent from it.

The engine half runs through both storages (``backend``): a run starts once, each failed attempt
is told, it finishes once, and nothing is told before the commit or for a rolled-back one. The
Django half sends ``durableflow.signals`` from it, in the process that committed.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging

import pytest
from django.db import transaction

import durableflow
from durableflow import RetryableError, operations, signals
from durableflow.engine import observing
from durableflow.engine.verbs import Engine
from durableflow.registry import registry
from tests.harness import SETTINGS

attempts: dict[str, int] = {}


def _fails(tag: str, failures: int, interval: float) -> int:
    attempts[tag] = attempts.get(tag, 0) + 1
    if attempts[tag] <= failures:
        raise RetryableError(f"attempt {attempts[tag]} failed", max_attempts=failures + 1, retry_interval=interval)
    return attempts[tag]


def _always_fails() -> None:
    raise ValueError("no luck")


@durableflow.workflow("signals.flaky")
def flaky(ctx, params):
    ctx.step.run("first", lambda: 1)
    return ctx.step.run("flaky", _fails, params["tag"], params["failures"], params.get("interval", 1.0))


@durableflow.workflow("signals.broken")
def broken(ctx, params):
    return ctx.step.run("broken", _always_fails)


@durableflow.workflow("signals.nap")
def nap(ctx, params):
    ctx.step.sleep("nap", 60)


@pytest.fixture(autouse=True)
def _reset():
    attempts.clear()


class Told(list):
    def __call__(self, event, fields):
        self.append((event, dict(fields)))

    def events(self):
        return [(event, fields.get("step_key"), fields["status"]) for event, fields in self]


@pytest.fixture
def told(backend, django_capture_on_commit_callbacks):
    """The backend's engine with an observer; ``told.committed()`` runs the ORM's on-commit
    callbacks (the test's transaction never commits) around a block, a no-op in memory."""
    recorder = Told()
    backend.engine = Engine(backend.storage, registry, dataclasses.replace(SETTINGS, notify=recorder))
    if backend.name == "orm":
        recorder.committed = lambda: django_capture_on_commit_callbacks(execute=True)
    else:
        recorder.committed = contextlib.nullcontext
    return recorder


def test_a_run_is_told_started_once_each_failed_attempt_and_finished_once(backend, told):
    with told.committed():
        execution_id = backend.start("signals.flaky", {"tag": backend.name, "failures": 2})
        assert told == []  # started at its first claim, not at its start
        backend.run(execution_id)

    assert told.events() == [
        (observing.STARTED, None, "running"),
        (observing.STEP_FAILED, "flaky", "waiting"),
        (observing.STEP_FAILED, "flaky", "waiting"),
        (observing.FINISHED, None, "completed"),
    ]
    assert {fields["execution_id"] for _, fields in told} == {execution_id}
    assert {fields["workflow"] for _, fields in told} == {"signals.flaky"}
    failed = [fields for event, fields in told if event == observing.STEP_FAILED]
    assert [f["attempt"] for f in failed] == [1, 2]
    assert failed[0]["error"]["message"] == "attempt 1 failed"


def test_a_failed_run_tells_its_last_attempt_failed_and_its_end(backend, told):
    with told.committed():
        execution_id = backend.run(backend.start("signals.broken", {})).id

    assert told.events() == [
        (observing.STARTED, None, "running"),
        (observing.STEP_FAILED, "broken", "failed"),
        (observing.FINISHED, None, "failed"),
    ]
    assert told[-1][1]["error"]["message"] == "no luck"
    assert told[-1][1]["execution_id"] == execution_id


def test_a_cancel_tells_the_end_of_a_run_that_never_started(backend, told):
    with told.committed():
        execution_id = backend.start("signals.nap", {})
        backend.cancel(execution_id, "not wanted")

    assert told.events() == [(observing.FINISHED, None, "cancelled")]
    assert told[0][1]["error"] == {"code": "CANCELLED", "message": "not wanted"}


def test_nothing_is_told_for_a_transaction_that_rolled_back(backend, told):
    with told.committed():
        execution_id = backend.start("signals.nap", {})
        with pytest.raises(RuntimeError), backend.storage.atomic():
            backend.cancel(execution_id)
            assert told == []  # not before the commit either
            raise RuntimeError("roll it back")

    assert told == []
    assert backend.get(execution_id).status == "pending"


def test_an_observer_that_raises_is_logged_and_the_delivery_goes_on(backend, told, caplog):
    def raising(event, fields):
        raise RuntimeError("observer down")

    backend.engine = Engine(backend.storage, registry, dataclasses.replace(SETTINGS, notify=raising))
    with told.committed(), caplog.at_level(logging.ERROR, logger="durableflow.signals"):
        execution = backend.run(backend.start("signals.flaky", {"tag": backend.name, "failures": 1}))

    assert execution.status == "completed"
    assert [r.getMessage() for r in caplog.records].count("the observer of execution_started raised; ignored") == 1
    assert caplog.records[0].execution_id == execution.id


# The Django signals ---------------------------------------------------------------------------


@pytest.fixture
def received():
    got = []

    def receiver(signal, sender, **kwargs):
        got.append((signal, kwargs))

    for signal in (signals.execution_started, signals.execution_finished, signals.step_failed):
        signal.connect(receiver, dispatch_uid=f"test-{id(signal)}")
    yield got
    for signal in (signals.execution_started, signals.execution_finished, signals.step_failed):
        signal.disconnect(dispatch_uid=f"test-{id(signal)}")


def _names(got):
    names = {signals.execution_started: "started", signals.execution_finished: "finished"}
    names[signals.step_failed] = "step_failed"
    return [(names[signal], kwargs["status"]) for signal, kwargs in got]


@pytest.mark.django_db(transaction=True)
def test_the_django_signals_are_sent_after_each_commit_with_their_fields(received):
    execution = operations.start("signals.flaky", {"tag": "django", "failures": 1, "interval": 0})
    operations.deliver(execution.id)
    assert _names(received) == [("started", "running"), ("step_failed", "waiting")]

    operations.deliver(execution.id)  # the retry, due at once

    assert _names(received) == [("started", "running"), ("step_failed", "waiting"), ("finished", "completed")]
    started, failed, finished = (kwargs for _, kwargs in received)
    assert started == {"execution_id": execution.id, "workflow": "signals.flaky", "status": "running"}
    assert failed["step_key"] == "flaky" and failed["attempt"] == 1
    assert failed["error"]["message"] == "attempt 1 failed"
    assert finished == {"execution_id": execution.id, "workflow": "signals.flaky", "status": "completed", "error": None}


@pytest.mark.django_db(transaction=True)
def test_no_django_signal_for_a_rolled_back_cancel_and_one_after_a_committed_one(received):
    execution = operations.start("signals.nap", {})
    with pytest.raises(RuntimeError), transaction.atomic():
        operations.cancel(execution.id)
        raise RuntimeError("roll it back")
    assert received == []

    with transaction.atomic():
        operations.cancel(execution.id, "enough")
        assert received == []  # sent after the commit, not at the write
    assert _names(received) == [("finished", "cancelled")]
    assert received[0][1]["error"] == {"code": "CANCELLED", "message": "enough"}


@pytest.mark.django_db(transaction=True)
def test_a_receiver_that_raises_is_logged_and_the_others_still_run(received, caplog):
    def broken_receiver(sender, **kwargs):
        raise RuntimeError("receiver down")

    signals.execution_finished.connect(broken_receiver, dispatch_uid="broken")
    try:
        execution = operations.start("signals.nap", {})
        with caplog.at_level(logging.ERROR, logger="durableflow.signals"):
            operations.cancel(execution.id)
    finally:
        signals.execution_finished.disconnect(dispatch_uid="broken")

    assert operations.get(execution.id).status == "cancelled"
    assert _names(received) == [("finished", "cancelled")]
    (record,) = [r for r in caplog.records if r.name == "durableflow.signals"]
    assert record.getMessage().startswith("a receiver of execution_finished (")
    assert "RuntimeError('receiver down')" in record.getMessage() and record.execution_id == execution.id
    assert any(r.name == "django.dispatch" and r.exc_info for r in caplog.records)  # with its traceback


def _undo(*args) -> None:
    return None


@durableflow.workflow("signals.compensable-nap")
def compensable_nap(ctx, params):
    ctx.step.run("book", lambda: "booked", compensate=_undo)
    ctx.step.sleep("nap", 60)


def test_a_cancel_that_compensates_tells_the_end_once_when_the_compensations_ran(backend, told):
    with told.committed():
        execution_id = backend.start("signals.compensable-nap", {})
        backend.deliver(execution_id)  # booked, asleep
        backend.cancel(execution_id)  # not the end yet: its delivery must compensate first
        assert backend.get(execution_id).status == "pending"
        backend.deliver(execution_id)

    assert told.events() == [(observing.STARTED, None, "running"), (observing.FINISHED, None, "cancelled")]
    assert backend.get(execution_id).compensations[0]["step"] == "book"
