"""``result()`` is woken by the finishing transaction, and the database re-check is its safety net.

On PostgreSQL a trigger notifies ``durableflow_finished`` when an execution ends and one
listening connection per process wakes every waiting caller. These tests take the
notification away (the trigger disabled, the listening connection killed) and count
connections while hundreds of callers wait.
"""

from __future__ import annotations

import importlib
import threading
import time

import pytest
from django.db import connections
from django.test import override_settings
from django.test.utils import CaptureQueriesContext

import durableflow
from durableflow import exceptions, operations
from durableflow.engine.states import TERMINAL
from durableflow.engine.steering import OUTCOME_FIELDS
from durableflow.orm import db_alias, waiting
from tests.helpers import uid, wait_for

NOBODY = "durableflow-test-nobody"  # a queue no worker consumes: what starts there stays pending


def _postgres() -> bool:
    return connections[db_alias()].vendor == "postgresql"


@pytest.fixture
def postgres(live_db):
    if not _postgres():
        pytest.skip("PostgreSQL only: SQLite has no notification, its callers poll")


def _listener() -> waiting.Listener:
    return waiting.listener(db_alias())


def _table() -> str:
    from durableflow.models import Execution

    return Execution._meta.db_table


def _sql(statement: str, params=()) -> list[tuple]:
    with connections[db_alias()].cursor() as cursor:
        cursor.execute(statement, params)
        return cursor.fetchall() if cursor.description else []


class Caller(threading.Thread):
    """``durableflow.result()`` in its own thread; keeps what it returned or raised."""

    def __init__(self, execution_id: str, timeout: float = 120) -> None:
        super().__init__(daemon=True)
        self.execution_id, self.timeout = execution_id, timeout
        self.outcome: object = None
        self.seconds: float | None = None

    def run(self) -> None:
        started = time.monotonic()
        try:
            self.outcome = durableflow.result(self.execution_id, timeout=self.timeout)
        except Exception as exc:  # noqa: BLE001 - what result() raised is the outcome under test
            self.outcome = exc
        finally:
            self.seconds = time.monotonic() - started
            connections.close_all()


def _start_waiting_callers(ids: list[str]) -> list[Caller]:
    """One caller per id, each registered with the listener before the next starts."""
    callers = []
    for execution_id in ids:
        caller = Caller(execution_id)
        caller.start()
        callers.append(caller)
        if _postgres():
            _wait_registered(caller)
    return callers


def _wait_registered(caller: Caller) -> None:
    """Until ``caller`` waits on the listener for its execution (none of these ends by itself)."""
    wait_for(
        lambda: _listener().waiting(caller.execution_id) or not caller.is_alive(),
        timeout=30,
        interval=0.005,
        what="the caller to wait",
    )
    assert caller.is_alive(), f"the caller of {caller.execution_id} ended before it waited: {caller.outcome!r}"


def test_the_migration_notifies_for_exactly_the_terminal_statuses():
    migration = importlib.import_module("durableflow.migrations.0009_finish_notify")

    assert set(migration.TERMINAL) == set(TERMINAL)


def test_the_notification_carries_exactly_what_result_reads():
    migration = importlib.import_module("durableflow.migrations.0011_finish_notice")

    assert migration.FIELDS == OUTCOME_FIELDS


@pytest.mark.integration
def test_a_started_run_is_returned_to_a_caller_waiting_before_it_finished(cluster, live_db):
    """Real worker, woken path: the run waits for a signal while the caller waits for the run."""
    execution = durableflow.start("t.wait-signal")
    # The re-check is an hour away: only the notification (or SQLite's poll, which backs off
    # from 2 ms) can return it before the caller's timeout.
    with override_settings(DURABLEFLOW={"RESULT_RECHECK_SECONDS": 3600 if _postgres() else 0.2}):
        caller = Caller(execution.id, timeout=120)
        caller.start()
        wait_for(
            lambda: operations.get(execution.id).status == "waiting", timeout=60, what="the run to wait for its signal"
        )
        notified = _listener().notified
        durableflow.signal(execution.id, "go", {"value": 7})
        caller.join(timeout=120)

    assert not caller.is_alive()
    assert caller.outcome == {"value": 7}
    if _postgres():
        assert _listener().notified > notified


def test_without_the_notification_the_recheck_returns_the_result(postgres):
    """The trigger disabled: nothing notifies, and the default re-check still answers."""
    execution = durableflow.start("t.ping", queue=NOBODY)
    notified = _listener().notified
    _sql(f'ALTER TABLE "{_table()}" DISABLE TRIGGER durableflow_execution_finished')
    try:
        [caller] = _start_waiting_callers([execution.id])
        durableflow.cancel(execution.id, "no notification for this one")
        caller.join(timeout=60)
    finally:
        _sql(f'ALTER TABLE "{_table()}" ENABLE TRIGGER durableflow_execution_finished')

    assert not caller.is_alive()
    assert isinstance(caller.outcome, exceptions.ExecutionFailed) and caller.outcome.status == "cancelled"
    assert _listener().notified == notified  # nothing was notified: the re-check found it
    # It waited at most one re-check interval (1 s by default) after the cancel, plus slack
    # for a loaded machine.
    assert caller.seconds is not None and caller.seconds < 1.0 + 10


def _finish_once_waiting(execution_id: str) -> threading.Thread:
    """Deliver ``execution_id`` here (in a thread of its own) once a caller waits for it."""

    def finish() -> None:
        try:
            wait_for(lambda: _listener().waiting(execution_id), timeout=30, what="the caller to wait")
            operations.deliver(execution_id)
        finally:
            connections.close_all()

    thread = threading.Thread(target=finish, daemon=True)
    thread.start()
    return thread


def _reads(queries: list[dict]) -> int:
    """The executions read (this thread's connection: the caller's own reads)."""
    return sum(1 for query in queries if query["sql"].startswith("SELECT") and f'FROM "{_table()}"' in query["sql"])


@pytest.mark.parametrize("size", [10, 9000])
def test_a_woken_result_answers_from_the_notification_when_the_outcome_fits_in_it(postgres, size):
    """The payload carries the outcome (id, status, result, error, continued_as) when it is
    under PostgreSQL's 8,000 bytes: the woken caller then reads nothing more. A larger one is
    announced by id, and the caller reads it."""
    params = {"text": "x" * size}
    execution = durableflow.start("t.return-params", params, queue=NOBODY)
    connection = connections[db_alias()]
    notified = _listener().notified
    with override_settings(DURABLEFLOW={"RESULT_RECHECK_SECONDS": 3600}):
        finisher = _finish_once_waiting(execution.id)
        with CaptureQueriesContext(connection) as captured:
            value = durableflow.result(execution.id, timeout=60)
        finisher.join(timeout=60)

    assert value == params
    assert _listener().notified > notified  # woken by the notification, not the hour's re-check
    # The read before waiting, and one after the wake only if the outcome did not fit.
    assert _reads(captured.captured_queries) == (1 if size < 8000 else 2)


def test_the_notification_payload_is_the_committed_outcome(postgres):
    import psycopg

    small = durableflow.start("t.ping", queue=NOBODY)
    large = durableflow.start("t.return-params", {"text": "y" * 9000}, queue=NOBODY)
    params = connections[db_alias()].get_connection_params()
    for name in ("cursor_factory", "context"):
        params.pop(name, None)
    with psycopg.connect(**params, autocommit=True) as listening:
        listening.execute(f"LISTEN {waiting.CHANNEL}")
        durableflow.cancel(small.id, "for the payload")
        assert operations.deliver(large.id) == "completed"
        payloads = {}
        for notify in listening.notifies(timeout=10):
            execution_id, notice = waiting.read_notice(notify.payload)
            payloads[execution_id] = notice
            if small.id in payloads and large.id in payloads:
                break

    assert payloads[small.id] == {
        "id": small.id,
        "status": "cancelled",
        "result": None,
        "error": {"code": "CANCELLED", "message": "for the payload"},
        "continued_as": None,
    }
    assert payloads[large.id] is None  # 9,000 bytes of result: the id alone


def test_a_notification_names_an_execution_by_its_payload():
    assert waiting.read_notice('{"id": "a1", "status": "completed", "result": 3}') == (
        "a1",
        {"id": "a1", "status": "completed", "result": 3},
    )
    assert waiting.read_notice('{"id": "a1"}') == ("a1", None)  # too large to carry: read it
    assert waiting.read_notice("a1") == ("a1", None)  # the id alone, as migration 0009 sent it
    assert waiting.read_notice("123") == ("123", None)  # an id that is also JSON
    assert waiting.read_notice('{"id": 5}') == ('{"id": 5}', None)


def test_a_killed_listening_connection_is_opened_again_and_callers_still_return(postgres):
    execution = durableflow.start("t.ping", queue=NOBODY)
    with override_settings(DURABLEFLOW={"RESULT_RECHECK_SECONDS": 3600}):
        [caller] = _start_waiting_callers([execution.id])
        listener = _listener()
        killed, connects = listener.backend_pid, listener.connects
        assert killed is not None
        _sql("SELECT pg_terminate_backend(%s)", [killed])
        wait_for(lambda: listener.connects > connects, timeout=30, what="the listener to connect again")
        assert listener.backend_pid not in (None, killed)
        durableflow.cancel(execution.id, "after the reconnect")
        caller.join(timeout=60)  # an hour's re-check away: only a notification returns it

    assert not caller.is_alive()
    assert isinstance(caller.outcome, exceptions.ExecutionFailed) and caller.outcome.status == "cancelled"


def test_two_hundred_waiting_callers_hold_one_listening_connection(postgres):
    tag = uid("many")
    ids = [durableflow.start("t.ping", {"tag": tag, "n": n}, queue=NOBODY).id for n in range(200)]
    listener = _listener()
    before = _connections()
    with override_settings(DURABLEFLOW={"RESULT_RECHECK_SECONDS": 3600}):
        callers = _start_waiting_callers(ids)
        listening = _listening_connections()
        # A caller is counted as waiting before its first read, so the last ones may still hold
        # that read's connection for a moment: wait for them to close it, as each does before
        # it waits. The waiting threads hold no connection of their own: at most the listener's
        # is new (what the session already had open is counted in ``before``), far below 200.
        # The slack is for a worker of the session opening one meanwhile.
        wait_for(
            lambda: len(_connections()) - len(before) < 10,
            timeout=60,
            what="the waiting callers to hold no connection of their own",
        )
        notified, connects = listener.notified, listener.connects
        for execution_id in ids:
            durableflow.cancel(execution_id, "enough")
        for caller in callers:
            caller.join(timeout=120)

    assert listening == 1
    assert [caller.is_alive() for caller in callers] == [False] * 200
    assert {getattr(caller.outcome, "status", caller.outcome) for caller in callers} == {"cancelled"}
    if listener.connects == connects:  # (a reconnect would wake them all at once instead)
        assert listener.notified - notified == 200


def test_a_timeout_returns_the_unfinished_execution_and_result_raises(live_db):
    execution = durableflow.start("t.ping", queue=NOBODY)
    try:
        assert operations.wait_finished(execution.id, 0.2).status == "pending"
        with pytest.raises(exceptions.WaitTimeout):
            durableflow.result(execution.id, timeout=0.2)
    finally:
        durableflow.cancel(execution.id)


def test_an_unknown_id_raises_not_found(live_db):
    with pytest.raises(exceptions.ExecutionNotFound):
        durableflow.result(uid("nobody"), timeout=1)


def test_an_idle_listener_closes_its_connection_and_the_next_caller_opens_it_again(postgres, monkeypatch):
    monkeypatch.setattr(waiting, "IDLE_SECONDS", 0.5)
    listener = _listener()
    first = durableflow.start("t.ping", queue=NOBODY)
    [caller] = _start_waiting_callers([first.id])
    durableflow.cancel(first.id)
    caller.join(timeout=60)
    wait_for(lambda: _listening_connections() == 0, timeout=30, what="the idle listener to close its connection")
    assert listener.backend_pid is None
    connects = listener.connects

    second = durableflow.start("t.ping", queue=NOBODY)
    [caller] = _start_waiting_callers([second.id])
    wait_for(lambda: listener.connects == connects + 1, timeout=30, what="the listener to connect again")
    assert _listening_connections() == 1
    durableflow.cancel(second.id)
    caller.join(timeout=60)
    assert getattr(caller.outcome, "status", None) == "cancelled"


def _connections() -> list[tuple]:
    """Every connection to this database: (application, state, query) of each."""
    return _sql(
        "SELECT application_name, state, left(query, 60) FROM pg_stat_activity WHERE datname = current_database()"
    )


def _listening_connections() -> int:
    return _sql(
        # The last statement a listening connection ran is one of its LISTENs.
        "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND query IN (%s, %s)",
        [f"LISTEN {waiting.CHANNEL}", f"LISTEN {waiting.STREAM_CHANNEL}"],
    )[0][0]
