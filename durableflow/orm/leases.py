"""The heartbeat: one background thread per worker process renews running deliveries' leases."""

from __future__ import annotations

import functools
import math
import os
import threading
import time
import weakref
from dataclasses import dataclass, field
from datetime import timedelta

from django.db import DEFAULT_DB_ALIAS, connections
from django.db.models import DateTimeField, ExpressionWrapper
from django.db.models.functions import Now

from durableflow.engine import logs

__all__ = ["Lease", "LeaseKeeper", "keeper"]

logger = logs.logger("durableflow.lease")


@dataclass(eq=False)
class Lease:
    execution_id: str
    token: str
    seconds: float
    offset: timedelta = timedelta(0)
    alias: str = DEFAULT_DB_ALIAS  # the database that holds the execution's row
    renewed: float = field(default_factory=time.monotonic)
    lost: bool = False

    @property
    def due(self) -> float:
        """When (``time.monotonic()``) to renew it: once a third of its length has passed."""
        return self.renewed + self.seconds / 3


def lease_until(seconds: float, offset: timedelta = timedelta(0)) -> ExpressionWrapper:
    """The database clock plus ``seconds`` (and a test clock offset)."""
    return ExpressionWrapper(Now() + (offset + timedelta(seconds=seconds)), output_field=DateTimeField())


class LeaseKeeper:
    """Renews the leases of this process's deliveries while their steps run.

    A delivery shorter than a third of its lease costs nothing: only leases older than that
    are renewed, each by one fenced UPDATE. A renewal that matches no row means another
    delivery took the execution over; the lease is marked lost and the delivery stops at its
    next step (its writes are fenced anyway).

    The thread is started by the first ``hold()`` in each process (so it also runs in
    Celery's forked pool processes) and is a daemon. With no lease held it blocks on an
    event, without a timeout and without a database connection, until ``hold()`` or
    ``stop()`` sets it; with leases it sleeps until the next one is due.

    Concurrency: deliveries call ``hold``/``release`` from their own threads while the
    heartbeat reads the set; ``_leases``, ``_pid`` and ``_thread`` are read and written
    only under ``_lock``, and the database is never touched while holding it.
    """

    #: The least time between two renewal passes: the retry delay after a failed renewal.
    tick = 0.5

    def __init__(self) -> None:
        self._reset()
        # A child forked while another thread held the lock would inherit it locked, and
        # the parent's leases and thread are not the child's: start the child afresh.
        os.register_at_fork(after_in_child=functools.partial(_reset_in_child, weakref.ref(self)))

    def _reset(self) -> None:
        self._lock = threading.Lock()
        self._leases: set[Lease] = set()
        self._pid: int | None = None  # the process whose heartbeat thread is ``_thread``
        self._thread: threading.Thread | None = None
        self._wake = threading.Event()  # each thread gets its own: a stopped one must see its stop
        self._next_pass = math.inf  # when the thread will look again by itself
        self._passes = 0

    def hold(
        self,
        execution_id: str,
        token: str,
        seconds: float,
        offset: timedelta = timedelta(0),
        alias: str = DEFAULT_DB_ALIAS,
    ) -> Lease:
        lease = Lease(execution_id, token, seconds, offset, alias)
        with self._lock:
            self._leases.add(lease)
            if self._thread is None or not self._thread.is_alive() or self._pid != os.getpid():
                self._pid = os.getpid()
                self._wake = threading.Event()
                self._thread = threading.Thread(
                    target=self._run, args=(self._wake,), name="durableflow-heartbeat", daemon=True
                )
                self._thread.start()
            elif lease.due < self._next_pass:  # idle, or asleep past this lease's due time
                self._wake.set()
        return lease

    def release(self, lease: Lease) -> None:
        with self._lock:
            if lease not in self._leases:
                return
            self._leases.remove(lease)
            if not self._leases:  # let the thread close its connection and go idle now
                self._wake.set()

    def held(self) -> list[Lease]:
        """The leases this process holds now."""
        with self._lock:
            return list(self._leases)

    @property
    def idle(self) -> bool:
        """Whether the thread (if any) holds no lease and sleeps until the next ``hold()``."""
        with self._lock:
            return not self._leases and self._next_pass == math.inf

    @property
    def passes(self) -> int:
        """How many times the thread woke up and looked at its leases (for tests)."""
        with self._lock:
            return self._passes

    def stop(self, timeout: float = 2.0) -> bool:
        """Stop the thread; return whether it ended within ``timeout`` seconds.

        For process shutdown (Celery's ``worker_process_shutdown``): an idle thread ends at
        once; a busy one ends after the renewal in flight, without starting another. Leases
        still held are kept (a later ``hold()`` starts a new thread that renews them) or,
        if the process exits, lapse and are taken over after ``LEASE_SECONDS``.
        """
        with self._lock:
            thread, self._thread = self._thread, None
            self._next_pass = math.inf
            self._wake.set()
        if thread is None or thread is threading.current_thread():
            return True
        thread.join(timeout)
        return not thread.is_alive()

    def _run(self, wake: threading.Event) -> None:
        used: set[str] = set()  # aliases this thread opened a connection on
        try:
            while self._woken(wake):
                for lease in self._due():
                    if self._still_held(lease):  # released meanwhile, or stop() called: skip it
                        self.renew(lease)
                        used.add(lease.alias)
                for alias in used:
                    connections[alias].close_if_unusable_or_obsolete()
                timeout = self._schedule()
                if timeout is None:
                    _close(used)  # idle: hold no connection while waiting for the next hold()
                wake.wait(timeout)
        finally:
            _close(used)

    def _woken(self, wake: threading.Event) -> bool:
        """Start a pass; False once this thread was stopped (or replaced)."""
        with self._lock:
            if self._thread is not threading.current_thread():
                return False
            self._passes += 1
            # Cleared under the lock: a hold() or release() from now on sets it again.
            wake.clear()
            return True

    def _due(self) -> list[Lease]:
        now = time.monotonic()
        with self._lock:
            return [lease for lease in self._leases if lease.due <= now]

    def _still_held(self, lease: Lease) -> bool:
        with self._lock:
            return self._thread is threading.current_thread() and lease in self._leases

    def _schedule(self) -> float | None:
        """Seconds until the next lease is due (at least a tick), or None when none is held."""
        with self._lock:
            if self._thread is not threading.current_thread():
                return 0.0  # stopped: straight back to _woken(), which ends the thread
            if not self._leases:
                self._next_pass = math.inf
                return None
            now = time.monotonic()
            self._next_pass = max(min(lease.due for lease in self._leases), now + self.tick)
            return self._next_pass - now

    def renew(self, lease: Lease) -> bool:
        from durableflow.models import Execution

        try:
            renewed = (
                Execution.objects.using(lease.alias)
                .filter(pk=lease.execution_id, lease_token=lease.token)
                .update(lease_expires_at=lease_until(lease.seconds, lease.offset))
            )
        except Exception:  # a database outage must not kill the thread; the lease may lapse
            logger.exception(
                "lease renewal of execution %s failed", lease.execution_id, extra={"execution_id": lease.execution_id}
            )
            connections[lease.alias].close()
            return False
        lease.renewed = time.monotonic()
        if not renewed:
            lease.lost = True
            logger.warning(
                "lease lost: execution %s was taken over by another delivery",
                lease.execution_id,
                extra={"execution_id": lease.execution_id},
            )
        return bool(renewed)


def _reset_in_child(ref: weakref.ref) -> None:
    keeper = ref()
    if keeper is not None:
        keeper._reset()


def _close(aliases: set[str]) -> None:
    for alias in aliases:
        connections[alias].close()
    aliases.clear()


keeper = LeaseKeeper()
