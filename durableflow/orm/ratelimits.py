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

An admission is a step's extra cost, so the common case (room now) is a few hand-written
statements, like the rest of a delivery's (``durableflow.orm.sql``): the lock, the lease with the
step's admission, the clock with two sums, the INSERT. A refused request reads the rows (ORM)
to learn when it would fit.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from django.db import transaction
from django.db.models import Q

from durableflow.engine.ratelimits import admission_time, fits_now
from durableflow.engine.states import RUNNABLE
from durableflow.models import Execution, RateLimitAdmission
from durableflow.orm.core import OrmCore
from durableflow.orm.sql import aware

__all__ = ["OrmRateLimits"]

# The first half of the advisory lock's two-integer key: "DFRL", so that durableflow's locks
# do not meet a project's own single-key advisory locks.
_LOCK_CLASS = 0x4446524C


class OrmRateLimits(OrmCore):
    """Rate-limit admissions on the models (a part of ``OrmStorage``)."""

    def _admissions(self):
        return RateLimitAdmission.objects.using(self.alias)

    def admit(
        self, key: str, limit: int, window: float, units: int, execution_id: str, step_key: str, token: str
    ) -> tuple[bool, datetime] | None:
        sql, cursor = self._sql()
        statements = _statements(self.connection, sql)
        offset = self.offset.total_seconds()
        with transaction.atomic(using=self.alias):
            if statements.lock_sql:
                cursor.execute(statements.lock_sql, {"class": _LOCK_CLASS, "key": key})
            cursor.execute(statements.own_sql, {"execution": execution_id, "token": token, "step": step_key})
            found = cursor.fetchone()
            if found is None:
                return None  # the lease is not this delivery's
            own, requested, admitted_at = found
            if admitted_at is not None:
                return True, aware(admitted_at)
            place = {"own": own, "requested": requested}
            cursor.execute(
                statements.sums_sql,
                {"key": key, "now": sql.moment(offset), "start": sql.moment(offset - window), **place},
            )
            now, used, ahead = cursor.fetchone()
            now = aware(now)
            if fits_now(used, ahead, units, limit):
                at = now
            else:
                at = self._refused(key, limit, window, units, now, None if own is None else (aware(requested), own))
            admit = at <= now
            values = {
                "now": self.connection.ops.adapt_datetimefield_value(now),
                "until": self.connection.ops.adapt_datetimefield_value(now + timedelta(seconds=window)),
            }
            if own is not None:
                if admit:
                    cursor.execute(statements.admit_sql, {"id": own, **values})
            else:
                cursor.execute(
                    statements.admitted_sql if admit else statements.request_sql,
                    {"key": key, "execution": execution_id, "step": step_key, "units": units, **values},
                )
            return (True, now) if admit else (False, at)

    def _refused(self, key: str, limit: int, window: float, units: int, now: datetime, place) -> datetime:
        """When a request that does not fit now would: from the key's rows (``admission_time``).
        ``place``: the (requested_at, id) of the step's own waiting request, if it has one."""
        rows = self._admissions().filter(key=key)
        admitted = rows.filter(admitted_at__gt=now - timedelta(seconds=window)).order_by("admitted_at")
        waiting = rows.filter(admitted_at__isnull=True, execution__status__in=RUNNABLE)
        if place is not None:
            requested, own = place
            waiting = waiting.filter(Q(requested_at__lt=requested) | Q(requested_at=requested, pk__lt=own))
        ahead = list(waiting.order_by("requested_at", "pk").values_list("units", flat=True))
        return admission_time(now, admitted.values_list("admitted_at", "units"), ahead, units, limit, window)

    def drop_spent_admissions(self, limit: int) -> int:
        now = self.now()
        # Out of its window (or never admitted) and of an execution that is finished or gone: an
        # unfinished one keeps its admission, which its step's next attempt looks up.
        spent = self._admissions().filter(Q(admitted_at__isnull=True) | Q(expires_at__lte=now))
        spent = spent.exclude(execution__status__in=RUNNABLE)
        ids = list(spent.order_by().values_list("pk", flat=True)[:limit])
        return self._admissions().filter(pk__in=ids).delete()[0] if ids else 0


class RateLimitStatements:
    """The admission's statements for one vendor (the clock expression of ``durableflow.orm.sql``)."""

    def __init__(self, connection, sql) -> None:
        qn = connection.ops.quote_name
        postgres = connection.vendor == "postgresql"
        text, big, stamp = ("::text", "::bigint", "::timestamptz") if postgres else ("", "", "")
        table, execution = qn(RateLimitAdmission._meta.db_table), qn(Execution._meta.db_table)

        def ac(name: str) -> str:  # a RateLimitAdmission column
            return qn(RateLimitAdmission._meta.get_field(name).column)

        def ec(name: str) -> str:  # an Execution column
            return qn(Execution._meta.get_field(name).column)

        self.lock_sql = "SELECT pg_advisory_xact_lock(%(class)s::integer, hashtext(%(key)s::text))" if postgres else ""
        # One row while the lease is this delivery's: the step's admission (or request), if any.
        self.own_sql = (
            f"SELECT a.{ac('id')}, a.{ac('requested_at')}, a.{ac('admitted_at')} FROM {execution} e "
            f"LEFT JOIN {table} a ON a.{ac('execution')} = e.{ec('id')} AND a.{ac('step_key')} = %(step)s{text} "
            f"WHERE e.{ec('id')} = %(execution)s{text} AND e.{ec('lease_token')} = %(token)s{text}"
        )
        unfinished = ", ".join(f"'{status}'" for status in sorted(RUNNABLE))
        # The clock, the units admitted in the window, and those of the older requests still
        # waiting (of unfinished executions; before the step's own request, if it has one).
        self.sums_sql = (
            f"SELECT {sql.moment_sql('now')}, "
            f"(SELECT COALESCE(SUM({ac('units')}), 0) FROM {table} "
            f"WHERE {ac('key')} = %(key)s{text} AND {ac('admitted_at')} > {sql.moment_sql('start')}), "
            f"(SELECT COALESCE(SUM(w.{ac('units')}), 0) FROM {table} w "
            f"JOIN {execution} e ON e.{ec('id')} = w.{ac('execution')} "
            f"WHERE w.{ac('key')} = %(key)s{text} AND w.{ac('admitted_at')} IS NULL "
            f"AND e.{ec('status')} IN ({unfinished}) AND (%(own)s{big} IS NULL "
            f"OR w.{ac('requested_at')} < %(requested)s{stamp} "
            f"OR (w.{ac('requested_at')} = %(requested)s{stamp} AND w.{ac('id')} < %(own)s{big})))"
        )
        columns = ", ".join(ac(c) for c in ("key", "execution", "step_key", "units", "requested_at"))
        values = f"%(key)s{text}, %(execution)s{text}, %(step)s{text}, %(units)s::integer, %(now)s{stamp}"
        if not postgres:
            values = values.replace("::integer", "")
        self.request_sql = f"INSERT INTO {table} ({columns}) VALUES ({values})"
        self.admitted_sql = (
            f"INSERT INTO {table} ({columns}, {ac('admitted_at')}, {ac('expires_at')}) "
            f"VALUES ({values}, %(now)s{stamp}, %(until)s{stamp})"
        )
        self.admit_sql = (
            f"UPDATE {table} SET {ac('admitted_at')} = %(now)s{stamp}, {ac('expires_at')} = %(until)s{stamp} "
            f"WHERE {ac('id')} = %(id)s{big}"
        )


_built: dict[tuple[str, str, str], RateLimitStatements] = {}


def _statements(connection, sql: Any) -> RateLimitStatements:
    key = (connection.vendor, RateLimitAdmission._meta.db_table, Execution._meta.db_table)
    if key not in _built:
        _built[key] = RateLimitStatements(connection, sql)
    return _built[key]
