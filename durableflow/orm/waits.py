"""The ORM storage's waits: waiters, events (signals, token completions) and watched executions.

Concurrency: an event is given to a waiter by one conditional UPDATE (the waiter must still be
open); the unique constraint on (execution, event) refuses a second waiter of the same
execution the same event, whoever assigns it. Both run in a savepoint, so that a refusal
does not break the caller's transaction.
"""

from __future__ import annotations

from contextlib import nullcontext
from typing import Any, Iterable

from django.db import IntegrityError, transaction
from django.db.models import Exists, OuterRef, Q, Subquery

from durableflow.engine.rows import WaiterRow
from durableflow.engine.states import DUE_ONLY, STEP_UNFINISHED, TERMINAL, WaiterStatus
from durableflow.engine.storage import ANY, CLOSED, CONSUMED, TAKEN, Satisfaction, Satisfied
from durableflow.models import Event, Execution, Waiter
from durableflow.orm import backend
from durableflow.orm.core import OrmCore
from durableflow.orm.satisfying import LOCK_CLASS, SatisfyStatements, lock_sql
from durableflow.orm.sql import statements

__all__ = ["OrmWaits"]

W = WaiterStatus
_satisfying: dict[str, SatisfyStatements] = {}  # by database alias


class OrmWaits(OrmCore):
    """Waiters and events on the models (a part of ``OrmStorage``)."""

    def _wait_rows(self):
        return Waiter.objects.using(self.alias)

    def _event_rows(self):
        return Event.objects.using(self.alias)

    def _guard(self):
        # Inside a transaction a savepoint keeps a refused write from breaking it; outside
        # one, the statement is its own transaction and needs nothing around it.
        return transaction.atomic(using=self.alias) if backend.in_transaction(self.connection) else nullcontext()

    def add_waiter(self, values: dict[str, Any]) -> Waiter:
        waiter = Waiter(**self._values(values))
        try:
            with self._guard():
                waiter.save(using=self.alias, force_insert=True)
        except IntegrityError:
            existing = self.get_waiter(values["execution_id"], values["key"])
            if existing is None:  # not a taken key: the execution is gone
                raise
            return existing
        return waiter

    def get_waiter(self, execution_id: str, key: str) -> Waiter | None:
        return self._wait_rows().filter(execution_id=execution_id, key=key).first()

    def open_waiters(
        self, kind: str, target: str, *, execution_id: str | None = None, payload: Any = ANY
    ) -> list[Waiter]:
        rows = self._wait_rows().filter(kind=kind, target=target, status=W.OPEN)
        if execution_id is not None:
            rows = rows.filter(execution_id=execution_id)
        if payload is not ANY and self.connection.vendor == "postgresql":
            # jsonb <@: a superset of the engine's containment test, so nothing is lost here. A
            # null payload contains no match but the absent one.
            contained = Q(match__contained_by=payload) if payload is not None else Q(pk__in=[])
            rows = rows.filter(Q(match__isnull=True) | contained)
        return list(rows.order_by("id"))

    def update_waiter(self, waiter_id: int, values: dict[str, Any], *, statuses: Iterable[str]) -> int:
        return self._wait_rows().filter(pk=waiter_id, status__in=list(statuses)).update(**self._values(values))

    def lock_waits(self, kind: str, key: str) -> None:
        if self.connection.vendor != "postgresql":
            return  # SQLite's IMMEDIATE transactions take the write lock at BEGIN
        _, cursor = self._sql()
        cursor.execute(lock_sql, {"lock_class": LOCK_CLASS, "lock_kind": kind, "lock": key})

    def satisfy_waits(self, request: Satisfaction) -> Satisfied | None:
        connection = self.connection
        if connection.vendor != "postgresql":
            return None  # step by step, in one IMMEDIATE transaction (``waits.satisfy_steps``)
        built = _satisfying.get(connection.alias)
        if built is None:
            built = _satisfying[connection.alias] = SatisfyStatements(
                connection.ops.quote_name, statements(connection).moment_sql("now")
            )
        sql, params = built.statement(request)
        params["now"] = self.offset.total_seconds()
        _, cursor = self._sql()
        # One round trip: the lock, then the statement, whose snapshot is taken once the lock is held.
        with backend.pipeline(connection):
            cursor.execute(lock_sql, {"lock_class": LOCK_CLASS, "lock_kind": request.kind, "lock": request.lock})
            cursor.execute(sql, params)
        return built.decode(request, cursor.fetchone())

    def add_event(self, values: dict[str, Any]) -> Event | None:
        event = Event(**self._values(values))
        try:
            with self._guard():
                event.save(using=self.alias, force_insert=True)
        except IntegrityError:
            return None
        return event

    def get_event(self, pk: int) -> Event | None:
        return self._event_rows().filter(pk=pk).first()

    def events_for(self, waiter: WaiterRow, *, after: int, limit: int) -> list[Event]:
        rows = self._event_rows().filter(kind=waiter.kind, name=waiter.target, pk__gt=after)
        if waiter.kind == "event":
            created = Execution.objects.using(self.alias).filter(pk=waiter.execution_id).values("created_at")
            rows = rows.filter(created_at__gte=Subquery(created[:1]))
            if waiter.match is not None and self.connection.vendor == "postgresql":
                rows = rows.filter(payload__contains=waiter.match)
        elif waiter.kind == "signal":
            rows = rows.filter(execution_id=waiter.execution_id)
        consumed = self._wait_rows().filter(execution_id=waiter.execution_id, event_id=OuterRef("pk"))
        return list(rows.filter(~Exists(consumed)).order_by("id")[:limit])

    def take_event(self, waiter_id: int, event_pk: int) -> str:
        try:
            with self._guard():
                taken = self._wait_rows().filter(pk=waiter_id, status=W.OPEN).update(
                    status=W.SATISFIED, event_id=event_pk, resolved_at=self._now()
                )
        except IntegrityError:  # durableflow_event_consumed_once
            return CONSUMED
        return TAKEN if taken else CLOSED

    def watch_execution(self, execution_id: str) -> Execution | None:
        if not self._executions().filter(pk=execution_id).update(watched=True):
            return None
        return self.get_execution(execution_id)

    def stranded_waiters(self, limit: int) -> list[str]:
        ended = self._executions().filter(pk=OuterRef("target"), status__in=list(TERMINAL))
        rows = (
            self._wait_rows()
            .filter(kind="child", status=W.OPEN, execution__status__in=list(DUE_ONLY))
            .filter(Exists(ended))
            .order_by()
            .values_list("execution_id", flat=True)
        )
        return sorted(set(rows[:limit]))

    def end_waits(self, execution_id: str, values: dict[str, Any]) -> None:
        self._wait_rows().filter(execution_id=execution_id, status=W.OPEN).update(
            status=W.EXPIRED, resolved_at=self._now()
        )
        self._steps().filter(
            execution_id=execution_id, kind="item", status__in=sorted(STEP_UNFINISHED)
        ).update(**self._values(values))

    def watchers(self, execution_id: str) -> list[str]:
        rows = self._wait_rows().filter(kind="child", target=execution_id, status=W.OPEN)
        return sorted(set(rows.values_list("execution_id", flat=True)))
