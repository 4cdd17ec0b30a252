"""The heartbeat: one background thread per worker process renews running deliveries' leases."""

from __future__ import annotations

import logging
import os
import threading
import time
from dataclasses import dataclass, field
from datetime import timedelta

from django.db import close_old_connections, connection
from django.db.models import DateTimeField, ExpressionWrapper
from django.db.models.functions import Now

__all__ = ["Lease", "LeaseKeeper", "keeper"]

logger = logging.getLogger("durableflow.lease")


@dataclass(eq=False)
class Lease:
    execution_id: str
    token: str
    seconds: float
    offset: timedelta = timedelta(0)
    renewed: float = field(default_factory=time.monotonic)
    lost: bool = False


def lease_until(seconds: float, offset: timedelta = timedelta(0)) -> ExpressionWrapper:
    """The database clock plus ``seconds`` (and a test clock offset)."""
    return ExpressionWrapper(Now() + (offset + timedelta(seconds=seconds)), output_field=DateTimeField())


class LeaseKeeper:
    """Renews the leases of this process's deliveries while their steps run.

    A delivery shorter than a third of its lease costs nothing: only leases older than that
    are renewed, each by one fenced UPDATE. A renewal that matches no row means another
    delivery took the execution over; the lease is marked lost and the delivery stops at its
    next step (its writes are fenced anyway). The thread is started lazily in each process,
    so it also runs in Celery's forked pool processes.
    """

    tick = 0.5

    def __init__(self) -> None:
        self._leases: set[Lease] = set()
        self._lock = threading.Lock()
        self._pid: int | None = None
        self._wake = threading.Event()

    def hold(self, execution_id: str, token: str, seconds: float, offset: timedelta = timedelta(0)) -> Lease:
        lease = Lease(execution_id, token, seconds, offset)
        with self._lock:
            self._leases.add(lease)
            if self._pid != os.getpid():
                self._pid = os.getpid()
                threading.Thread(target=self._run, name="durableflow-heartbeat", daemon=True).start()
        return lease

    def release(self, lease: Lease) -> None:
        with self._lock:
            self._leases.discard(lease)

    def _run(self) -> None:
        pid = os.getpid()
        while self._pid == pid:
            self._wake.wait(self.tick)
            now = time.monotonic()
            with self._lock:
                due = [lease for lease in self._leases if now - lease.renewed >= lease.seconds / 3]
            for lease in due:
                self.renew(lease)
            if due and not self._leases:
                connection.close()  # idle until the next long step: hold no connection
            elif due:
                close_old_connections()

    def renew(self, lease: Lease) -> bool:
        from durableflow.models import Execution

        try:
            renewed = Execution.objects.filter(pk=lease.execution_id, lease_token=lease.token).update(
                lease_expires_at=lease_until(lease.seconds, lease.offset)
            )
        except Exception:  # a database outage must not kill the thread; the lease may lapse
            logger.exception("lease renewal of execution %s failed", lease.execution_id)
            connection.close()
            return False
        lease.renewed = time.monotonic()
        if not renewed:
            lease.lost = True
            logger.warning("lease lost: execution %s was taken over by another delivery", lease.execution_id)
        return bool(renewed)


keeper = LeaseKeeper()
