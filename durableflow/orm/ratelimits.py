"""The ORM storage's rate limits: ``RateLimitAdmission`` rows, counted per key under a lock.

Concurrency: an admission is one transaction that first serialises the requests of its key, so
two workers cannot both count the same free unit. On PostgreSQL that is a transaction-level
advisory lock on the key's hash (keys that share a hash only take turns); SQLite's IMMEDIATE
transactions take the write lock at BEGIN, which serialises every writer. The clock is read
after the lock is taken (PostgreSQL's ``now()`` would be the transaction's start, earlier than
an admission written meanwhile by the holder of the lock), so the admission times of one key
only move forward. The lease check is in the same transaction; a delivery that loses its lease
right after it can only take the admission its execution's next delivery finds (one row per
(execution, step key)), never a second unit.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from django.db import transaction
from django.db.models import Q, Sum
from django.db.models.functions import Coalesce

from durableflow.engine.ratelimits import admission_time, fits_now
from durableflow.engine.states import RUNNABLE
from durableflow.models import RateLimitAdmission

__all__ = ["OrmRateLimits"]

# The first half of the advisory lock's two-integer key: "DFRL", so that durableflow's locks
# do not meet a project's own single-key advisory locks.
_LOCK_CLASS = 0x4446524C


class OrmRateLimits:
    """Rate-limit admissions on the models (a part of ``OrmStorage``)."""

    def _admissions(self):
        return RateLimitAdmission.objects.using(self.alias)

    def admit(
        self, key: str, limit: int, window: float, units: int, execution_id: str, step_key: str, token: str
    ) -> tuple[bool, datetime] | None:
        rows = self._admissions()
        with transaction.atomic(using=self.alias):
            if self.connection.vendor == "postgresql":
                with self.connection.cursor() as cursor:
                    cursor.execute("SELECT pg_advisory_xact_lock(%s, hashtext(%s))", [_LOCK_CLASS, key])
            if not self._executions().filter(pk=execution_id, lease_token=token).exists():
                return None
            own = rows.filter(execution_id=execution_id, step_key=step_key).first()
            if own is not None and own.admitted_at is not None:
                return True, own.admitted_at
            now = self.now()
            start = now - timedelta(seconds=window)
            in_window = rows.filter(key=key, admitted_at__gt=start)
            # Older requests still waiting, of unfinished executions (a cancelled one's stops counting).
            waiting = rows.filter(key=key, admitted_at__isnull=True, execution__status__in=RUNNABLE)
            if own is not None:
                waiting = waiting.filter(
                    Q(requested_at__lt=own.requested_at) | Q(requested_at=own.requested_at, pk__lt=own.pk)
                )
            # Two sums (each an index range) decide the common case, room now; the rows are read
            # only to tell a refused request when it would fit.
            used = in_window.aggregate(units=Coalesce(Sum("units"), 0))["units"]
            ahead_units = waiting.aggregate(units=Coalesce(Sum("units"), 0))["units"]
            at = now
            if not fits_now(used, ahead_units, units, limit):
                admitted = list(in_window.order_by("admitted_at").values_list("admitted_at", "units"))
                ahead = list(waiting.order_by("requested_at", "pk").values_list("units", flat=True))
                at = admission_time(now, admitted, ahead, units, limit, window)
            admit = at <= now
            fields = {"admitted_at": now, "expires_at": now + timedelta(seconds=window)} if admit else {}
            if own is not None:
                if fields:
                    rows.filter(pk=own.pk).update(**fields)
            else:
                rows.create(
                    key=key, execution_id=execution_id, step_key=step_key, units=units, requested_at=now, **fields
                )
            return (True, now) if admit else (False, at)

    def drop_spent_admissions(self, limit: int) -> int:
        now = self.now()
        # Out of its window (or never admitted) and of an execution that is finished or gone: an
        # unfinished one keeps its admission, which its step's next attempt looks up.
        spent = self._admissions().filter(Q(admitted_at__isnull=True) | Q(expires_at__lte=now))
        spent = spent.exclude(execution__status__in=RUNNABLE)
        ids = list(spent.order_by().values_list("pk", flat=True)[:limit])
        return self._admissions().filter(pk__in=ids).delete()[0] if ids else 0
