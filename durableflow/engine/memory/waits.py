"""The in-memory storage's waits: waiters, events (signals, token completions) and watched executions."""

from __future__ import annotations

from dataclasses import dataclass, fields
from datetime import datetime
from typing import Any, Iterable

from durableflow.engine.memory.clone import clone
from durableflow.engine.memory.core import MemoryCore
from durableflow.engine.rows import WaiterRow
from durableflow.engine.states import DUE_ONLY, STEP_UNFINISHED, TERMINAL, WaiterStatus
from durableflow.engine.storage import ANY, CLOSED, CONSUMED, TAKEN, Satisfaction, Satisfied

__all__ = ["MemoryWaiter", "MemoryEvent", "MemoryWaits"]

W = WaiterStatus


@dataclass
class MemoryWaiter:
    id: int
    execution_id: str
    key: str
    kind: str
    target: str
    match: Any = None
    status: str = W.OPEN
    event_id: int | None = None  # the event that satisfied it
    settles: bool = False  # whoever satisfies it may complete its step's record
    created_at: datetime | None = None
    deadline_at: datetime | None = None
    resolved_at: datetime | None = None


@dataclass
class MemoryEvent:
    id: int
    kind: str
    name: str
    event_id: str
    execution_id: str | None = None
    payload: Any = None
    created_at: datetime | None = None


_WAITER_FIELDS = frozenset(f.name for f in fields(MemoryWaiter))


class MemoryWaits(MemoryCore):
    """Waiters and events in memory (a part of ``InMemoryStorage``)."""

    def _next_id(self) -> int:
        pk = self.tables.next_id
        self.tables.next_id += 1
        return pk

    def add_waiter(self, values: dict[str, Any]) -> MemoryWaiter:
        with self.lock:
            existing = self.get_waiter(values["execution_id"], values["key"])
            if existing is not None:
                return existing
            waiter = MemoryWaiter(id=self._next_id(), **{k: self._value(v) for k, v in values.items()})
            waiter.created_at = waiter.created_at or self.clock()
            self.tables.waiters[waiter.id] = waiter
            return clone(waiter)

    def get_waiter(self, execution_id: str, key: str) -> MemoryWaiter | None:
        with self.lock:
            for waiter in self.tables.waiters.values():
                if waiter.execution_id == execution_id and waiter.key == key:
                    return clone(waiter)
        return None

    def open_waiters(
        self, kind: str, target: str, *, execution_id: str | None = None, payload: Any = ANY
    ) -> list[MemoryWaiter]:
        with self.lock:
            return [
                clone(w)
                for w in self.tables.waiters.values()
                if w.kind == kind
                and w.target == target
                and w.status == W.OPEN
                and (execution_id is None or w.execution_id == execution_id)
            ]

    def update_waiter(self, waiter_id: int, values: dict[str, Any], *, statuses: Iterable[str]) -> int:
        with self.lock:
            waiter = self.tables.waiters.get(waiter_id)
            if waiter is None or waiter.status not in set(statuses):
                return 0
            unknown = set(values) - _WAITER_FIELDS
            if unknown:
                raise TypeError(f"unknown waiter fields {sorted(unknown)}")
            for name, value in values.items():
                setattr(waiter, name, self._value(value))
            return 1

    def lock_waits(self, kind: str, key: str) -> None:
        pass  # one lock serialises every call; a transaction's copy is put back whole or not at all

    def satisfy_waits(self, request: Satisfaction) -> Satisfied | None:
        return None  # step by step, over the methods here (``waits.satisfy_steps``)

    def add_event(self, values: dict[str, Any]) -> MemoryEvent | None:
        with self.lock:
            if any(e.kind == values["kind"] and e.event_id == values["event_id"] for e in self.tables.events.values()):
                return None
            event = MemoryEvent(id=self._next_id(), **{k: self._value(v) for k, v in values.items()})
            event.created_at = event.created_at or self.clock()
            self.tables.events[event.id] = event
            return clone(event)

    def get_event(self, pk: int) -> MemoryEvent | None:
        with self.lock:
            return clone(self.tables.events.get(pk))

    def events_for(self, waiter: WaiterRow, *, after: int, limit: int) -> list[MemoryEvent]:
        with self.lock:
            execution = self.tables.executions.get(waiter.execution_id)
            if execution is None:
                return []
            consumed = {w.event_id for w in self.tables.waiters.values() if w.execution_id == waiter.execution_id}
            found = [
                e
                for pk, e in sorted(self.tables.events.items())
                if pk > after
                and e.kind == waiter.kind
                and e.name == waiter.target
                and pk not in consumed
                and (waiter.kind != "event" or _at_or_after(e.created_at, execution.created_at))
                and (waiter.kind != "signal" or e.execution_id == waiter.execution_id)
            ]
            return clone(found[:limit])

    def take_event(self, waiter_id: int, event_pk: int) -> str:
        with self.lock:
            waiter = self.tables.waiters.get(waiter_id)
            if waiter is None or waiter.status != W.OPEN:
                return CLOSED
            if any(w.execution_id == waiter.execution_id and w.event_id == event_pk for w in self.tables.waiters.values()):
                return CONSUMED
            waiter.status, waiter.event_id, waiter.resolved_at = W.SATISFIED, event_pk, self.clock()
            return TAKEN

    def watch_execution(self, execution_id: str):
        with self.lock:
            execution = self.tables.executions.get(execution_id)
            if execution is None:
                return None
            execution.watched = True
            return clone(execution)

    def stranded_waiters(self, limit: int) -> list[str]:
        with self.lock:
            executions = self.tables.executions
            found = {
                w.execution_id
                for w in self.tables.waiters.values()
                if w.kind == "child"
                and w.status == W.OPEN
                and w.target in executions
                and executions[w.target].status in TERMINAL
                and executions[w.execution_id].status in DUE_ONLY
            }
            return sorted(found)[:limit]

    def end_waits(self, execution_id: str, values: dict[str, Any]) -> None:
        with self.lock:
            for waiter in self.tables.waiters.values():
                if waiter.execution_id == execution_id and waiter.status == W.OPEN:
                    waiter.status, waiter.resolved_at = W.EXPIRED, self.clock()
            for record in self.tables.steps.get(execution_id, {}).values():
                if record.kind == "item" and record.status in STEP_UNFINISHED:
                    self.update_step(execution_id, record.key, values)

    def watchers(self, execution_id: str) -> list[str]:
        with self.lock:
            return sorted(
                {
                    w.execution_id
                    for w in self.tables.waiters.values()
                    if w.kind == "child" and w.target == execution_id and w.status == W.OPEN
                }
            )


def _at_or_after(moment: datetime | None, since: datetime | None) -> bool:
    """``moment >= since`` as SQL has it: false when either is unknown."""
    return moment is not None and since is not None and moment >= since
