"""Waiting for an execution to finish: woken by the database where it can, re-read always.

``result()``, the REST API's long poll (``GET executions/{id}/?wait=``) and anything else that
blocks on an execution's end call ``until_finished``. On PostgreSQL the transaction that
finishes an execution notifies (a trigger on the execution table, migrations
``0009_finish_notify`` and ``0011_finish_notice``: ``pg_notify('durableflow_finished', ...)``,
delivered only if it commits) with the outcome as committed: the id, status, result, error and
``continued_as`` (or the id alone for an outcome of 8,000 bytes or more). One thread per process
listens on its own connection and wakes the callers waiting for that id, handing them the
outcome: a caller that can answer from it (``result()``) does not read the row again; any other
re-reads the database when woken. Every caller re-reads at the latest every
``RESULT_RECHECK_SECONDS``, so a lost notification (the listening connection killed, a pooler
that does not carry ``LISTEN``) costs at most that interval, never the answer. The listener
closes its connection when nobody has waited for a while, and opens it again on demand.

A stream's reader (``durableflow.streams.read(..., wait=)``) waits the same way for a chunk: the
transaction that stores one notifies ``durableflow_stream`` with the execution's id (a trigger,
migration ``0018_streams``), heard by the same listening connection; the reader watches
``stream_key(id)`` besides the execution's end.

On SQLite, which cannot notify, a caller polls: every 2 ms at first, backing off to
``RESULT_RECHECK_SECONDS``.

A caller that had no database connection open when it began waiting closes the one its reads
open before each wait: hundreds of waiting threads hold one listening connection, not hundreds.
"""

from __future__ import annotations

import json
import os
import threading
import time
from contextlib import contextmanager
from typing import Any, Callable, Iterator, Union

from django.db import connections

from durableflow.engine import logs
from durableflow.orm import backend

__all__ = [
    "CHANNEL",
    "STREAM_CHANNEL",
    "Listener",
    "Wake",
    "listener",
    "read_notice",
    "stop_listening",
    "stream_key",
    "until",
]

logger = logs.logger(__name__)

CHANNEL = "durableflow_finished"
STREAM_CHANNEL = "durableflow_stream"  # a chunk was stored; the payload is its execution's id
# Adaptive poll where nothing notifies: the first read again after FIRST_POLL, then each wait
# BACKOFF times longer, up to the re-check interval.
FIRST_POLL = 0.002
BACKOFF = 1.5
# The listener closes its connection after this long without a waiting caller.
IDLE_SECONDS = 30.0


# What a waiter watches: an execution's id, or a stream's key (``stream_key``).
Watched = Union[str, tuple[str, str]]


class Wake(threading.Event):
    """A waiter's event, and the outcomes notified for the ids it watches (``id -> fields``)."""

    def __init__(self) -> None:
        super().__init__()
        self.notices: dict[Watched, dict[str, Any]] = {}


def stream_key(execution_id: str) -> tuple[str, str]:
    """What a stream's reader watches: woken when a chunk of ``execution_id`` is stored (not a
    string, so that no execution id can be mistaken for it)."""
    return (STREAM_CHANNEL, execution_id)


def read_notice(payload: str) -> tuple[str, dict[str, Any] | None]:
    """The id a notification names, and the outcome fields it carries (``None``: the id alone)."""
    try:
        notice = json.loads(payload)
    except ValueError:
        notice = None
    if not isinstance(notice, dict) or not isinstance(notice.get("id"), str):
        return payload, None  # an id as the payload (the trigger before migration 0011)
    return notice["id"], notice if "status" in notice else None


class Listener:
    """One ``LISTEN`` connection for the process, fanning notifications out to waiting threads.

    A waiter registers the ids it waits for before it reads them, so a notification that
    arrives between its read and its wait is not lost. When the connection is (re)opened,
    every waiter is woken to read again: what was notified while nobody listened is read.
    """

    def __init__(self, alias: str) -> None:
        self.alias = alias
        self._lock = threading.Lock()
        self._waiters: dict[Watched, set[Wake]] = {}
        self._thread: threading.Thread | None = None
        self._listening = threading.Event()
        self._stop = threading.Event()  # the current thread's
        self.backend_pid: int | None = None  # of the listening connection, while it is open
        self.connects = 0  # connections opened so far (a killed one is opened again)
        self.notified = 0  # notifications that woke at least one waiter

    # Waiters -----------------------------------------------------------------------------

    @contextmanager
    def waiter(self) -> Iterator[Callable[[Watched], Wake]]:
        """``watch(id) -> Wake``, set when ``id`` is notified (its ``notices[id]``: the outcome
        notified) or the listener reconnects."""
        event = Wake()
        watched: set[Watched] = set()

        def watch(execution_id: Watched) -> Wake:
            with self._lock:
                if execution_id not in watched:
                    watched.add(execution_id)
                    self._waiters.setdefault(execution_id, set()).add(event)
            self._ensure_running()
            return event

        try:
            yield watch
        finally:
            with self._lock:
                for execution_id in watched:
                    events = self._waiters.get(execution_id)
                    if events is not None:
                        events.discard(event)
                        if not events:
                            del self._waiters[execution_id]

    def waiting(self, execution_id: str | None = None) -> int:
        """How many waiters are registered (for ``execution_id``, or for any), for tests and the
        admin's curiosity."""
        with self._lock:
            if execution_id is not None:
                return len(self._waiters.get(execution_id, ()))
            return len({event for events in self._waiters.values() for event in events})

    def _wake(self, execution_id: Watched | None, notice: dict[str, Any] | None = None) -> None:
        with self._lock:
            if execution_id is None:
                events = {event for events in self._waiters.values() for event in events}
            else:
                events = set(self._waiters.get(execution_id, ()))
        for event in events:
            if notice is not None and execution_id is not None:
                event.notices[execution_id] = notice  # before set(): the woken thread finds it
            event.set()
        if events and execution_id is not None:
            self.notified += 1

    # The listening thread ------------------------------------------------------------------

    def _ensure_running(self) -> None:
        with self._lock:
            if self._thread is None or not self._thread.is_alive():
                self._stop = threading.Event()  # each thread its own: an ending one never stops the next
                self._thread = threading.Thread(
                    target=self._run, args=(self._stop,), name="durableflow-listener", daemon=True
                )
                self._thread.start()
        # The first waiter waits (briefly) for LISTEN to take effect, so that a notification sent
        # right after its first read is heard; if the database is unreachable, the re-check serves.
        self._listening.wait(timeout=1.0)

    def _run(self, stop: threading.Event) -> None:
        delay = 0.1
        idle_since = time.monotonic()
        connection = None
        try:
            while not stop.is_set():
                try:
                    connection = self._connect()
                    delay = 0.1
                    while not stop.is_set():
                        for notify in connection.notifies(timeout=1.0):
                            if notify.channel == STREAM_CHANNEL:
                                self._wake(stream_key(notify.payload))
                            else:
                                self._wake(*read_notice(notify.payload))
                        if self.waiting():
                            idle_since = time.monotonic()
                        elif time.monotonic() - idle_since > IDLE_SECONDS:
                            self._end_if_idle(stop)
                except Exception as exc:  # noqa: BLE001 - a killed connection, a restarted or unreachable database
                    logger.debug("durableflow listener: %s; listening again in %.1f s", exc, delay)
                    self._listening.clear()
                    self.backend_pid = None
                    _close(connection)
                    connection = None
                    self._wake(None)  # read again now: a notification may have been missed
                    stop.wait(delay)
                    delay = min(delay * 2, 5.0)
        finally:
            _close(connection)
            with self._lock:
                if self._thread is threading.current_thread():
                    self._listening.clear()
                    self.backend_pid = None

    def _end_if_idle(self, stop: threading.Event) -> None:
        # Under the lock that waiters register with: one that registers after this sees no
        # thread and starts the next one; one that registered before keeps this one going.
        with self._lock:
            if not self._waiters:
                stop.set()
                self._thread = None
                self._listening.clear()
                self.backend_pid = None

    def _connect(self) -> Any:
        import psycopg

        params = connections[self.alias].get_connection_params()
        for name in ("cursor_factory", "context"):
            params.pop(name, None)
        connection = psycopg.connect(**params, autocommit=True)
        try:
            connection.execute(f"LISTEN {CHANNEL}")
            connection.execute(f"LISTEN {STREAM_CHANNEL}")
        except Exception:
            _close(connection)
            raise
        self.backend_pid = connection.info.backend_pid
        self.connects += 1
        self._listening.set()
        self._wake(None)  # anything that finished while nobody listened is read now
        return connection

    def stop(self) -> None:
        """Close the listening connection and end the thread (a test database is about to go)."""
        with self._lock:
            thread, stop = self._thread, self._stop
        stop.set()
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=5)


def _close(connection: Any) -> None:
    if connection is not None:
        try:
            connection.close()
        except Exception:  # pragma: no cover  # noqa: BLE001 - closing a broken connection
            pass


_listeners: dict[str, Listener] = {}
_listeners_lock = threading.Lock()


def _forget_after_fork() -> None:
    """A forked child (a worker's pool process) has none of its parent's threads: start anew."""
    global _listeners, _listeners_lock
    _listeners, _listeners_lock = {}, threading.Lock()


os.register_at_fork(after_in_child=_forget_after_fork)


def stop_listening() -> None:
    """Close every listening connection of this process (before its database is dropped)."""
    with _listeners_lock:
        listeners = list(_listeners.values())
    for each in listeners:
        each.stop()


def listener(alias: str) -> Listener:
    """The process's listener for the database ``alias``."""
    with _listeners_lock:
        if alias not in _listeners:
            _listeners[alias] = Listener(alias)
        return _listeners[alias]


def until(
    execution_id: str,
    read: Callable[[], Any],
    finished: Callable[[Any], bool],
    key: Callable[[Any], str],
    timeout: float | None,
    *,
    alias: str,
    recheck: float,
    notice: Callable[[dict[str, Any]], Any] | None = None,
    also: tuple[Any, ...] = (),
) -> Any:
    """Call ``read()`` until ``finished(value)`` or ``timeout`` seconds passed; return the last value.

    ``key(value)`` names the execution whose end is awaited (a run that continued as new is
    carried on by another). Woken by the listener on PostgreSQL; an adaptive poll elsewhere.
    ``notice(fields)``: the value that a notification's outcome fields stand for, used instead
    of ``read()`` after a wake-up that carried them. ``also``: more keys whose notification wakes
    the caller to read again (``stream_key(id)``).
    """
    deadline = None if timeout is None else time.monotonic() + timeout
    connection = connections[alias]
    # Close what we opened, before each wait, unless it is the caller's (open already, or in a
    # transaction): a waiting thread then holds no connection.
    borrowed = backend.driver(connection) is None and not backend.in_transaction(connection)
    notifying = connection.vendor == "postgresql"
    with listener(alias).waiter() if notifying else _no_waiter() as watch:
        watching = execution_id
        woken = watch(watching)  # before the first read: a notification after it is not lost
        for extra in also:
            watch(extra)
        interval = recheck if notifying else FIRST_POLL
        noticed = None
        while True:
            woken.clear()  # before the read, for the same reason
            value = read() if noticed is None or notice is None else notice(noticed)
            if finished(value):
                return value
            if key(value) != watching:  # carried on by another execution: watch it, read again
                watching = key(value)
                woken = watch(watching)
                continue
            remaining = None if deadline is None else deadline - time.monotonic()
            if remaining is not None and remaining <= 0:
                return value
            if borrowed:
                connection.close()
            woken.wait(interval if remaining is None else min(interval, remaining))
            noticed = None if notice is None else woken.notices.pop(watching, None)
            if not notifying:
                interval = min(interval * BACKOFF, recheck)


@contextmanager
def _no_waiter() -> Iterator[Callable[[str], Wake]]:
    """A waiter that is never woken: the caller polls."""
    event = Wake()
    yield lambda execution_id: event
