"""``durableflow.streams.read``: chunks as they commit; ``wait=`` woken by the chunk's notification."""

from __future__ import annotations

import threading
import time

import pytest
from django.db import connections
from django.test import override_settings

import durableflow
from durableflow import exceptions, operations
from durableflow.orm import waiting
from durableflow.orm import db_alias
from tests.helpers import wait_for

NOBODY = "durableflow-test-nobody"  # a queue no worker consumes: the test plays the delivery


class Reader(threading.Thread):
    """``durableflow.streams.read(..., wait=)`` in its own thread; keeps what it returned."""

    def __init__(self, execution_id: str, after: int = 0, wait: float = 60) -> None:
        super().__init__(daemon=True)
        self.execution_id, self.after, self.wait = execution_id, after, wait
        self.page: object = None
        self.seconds: float | None = None

    def run(self) -> None:
        started = time.monotonic()
        try:
            self.page = durableflow.streams.read(self.execution_id, "out", after=self.after, wait=self.wait)
        except Exception as exc:  # noqa: BLE001 - what read() raised is the outcome under test
            self.page = exc
        finally:
            self.seconds = time.monotonic() - started
            connections.close_all()


def _claimed(execution_id: str):
    journal = operations.engine().journal(execution_id)
    assert journal.claim() is not None
    return journal


def _waiting(reader: Reader) -> None:
    if connections[db_alias()].vendor == "postgresql":
        key = waiting.stream_key(reader.execution_id)
        wait_for(lambda: waiting.listener(db_alias()).waiting(key), timeout=30, what="the reader to wait")


def test_a_waiting_reader_is_woken_by_the_chunk_that_commits(live_db):
    execution = durableflow.start("t.ping", queue=NOBODY)
    journal = _claimed(execution.id)
    try:
        journal.write_chunk("out", 1, "first")
        # The re-check is an hour away on PostgreSQL: only the chunk's notification can wake
        # the reader before its wait ends (SQLite polls, backing off from 2 ms).
        with override_settings(DURABLEFLOW={"RESULT_RECHECK_SECONDS": 3600 if _pg() else 0.2}):
            reader = Reader(execution.id, after=1)
            reader.start()
            _waiting(reader)
            journal.write_chunk("out", 2, {"second": True})
            reader.join(timeout=30)
    finally:
        journal.close()

    assert not reader.is_alive()
    assert [(c["seq"], c["chunk"]) for c in reader.page["chunks"]] == [(2, {"second": True})]
    assert reader.page["done"] is False
    assert reader.seconds < 10


def test_a_waiting_reader_is_told_when_the_run_ends(live_db):
    execution = durableflow.start("t.ping", queue=NOBODY)
    with override_settings(DURABLEFLOW={"RESULT_RECHECK_SECONDS": 3600 if _pg() else 0.2}):
        reader = Reader(execution.id)
        reader.start()
        _waiting(reader)
        durableflow.cancel(execution.id, "no chunks for this one")
        reader.join(timeout=30)

    assert not reader.is_alive()
    assert reader.page == {"chunks": [], "done": True}


def test_a_wait_that_ends_answers_an_empty_page(live_db):
    execution = durableflow.start("t.ping", queue=NOBODY)

    page = durableflow.streams.read(execution.id, "out", wait=0.05)

    assert page == {"chunks": [], "done": False}
    assert durableflow.streams.streams(execution.id) == {}
    operations.cancel(execution.id)


@pytest.mark.parametrize("wait", [-1, float("nan"), float("inf"), True, "1"])
def test_a_bad_wait_is_refused(live_db, wait):
    with pytest.raises(ValueError, match="wait"):
        durableflow.streams.read("any", "out", wait=wait)


def test_an_unknown_execution_is_not_found(live_db):
    with pytest.raises(exceptions.ExecutionNotFound):
        durableflow.streams.read("no-such-execution", "out", wait=0.01)


def _pg() -> bool:
    return connections[db_alias()].vendor == "postgresql"
