"""The in-memory storage's rate limits: admissions (and waiting requests) in a dictionary."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from durableflow.engine.memory.clone import clone
from durableflow.engine.memory.core import MemoryCore
from durableflow.engine.ratelimits import admission_time
from durableflow.engine.states import RUNNABLE

__all__ = ["MemoryAdmission", "MemoryRateLimits"]


@dataclass
class MemoryAdmission:
    """A ``RateLimitAdmission`` row: a step's request for units of a key, admitted or waiting."""

    id: int
    key: str
    execution_id: str | None
    step_key: str
    units: int
    requested_at: datetime
    admitted_at: datetime | None = None
    expires_at: datetime | None = None


class MemoryRateLimits(MemoryCore):
    """Rate limits in memory (a part of ``InMemoryStorage``; its lock serialises every request)."""

    def admit(
        self, key: str, limit: int, window: float, units: int, execution_id: str, step_key: str, token: str
    ) -> tuple[bool, datetime] | None:
        with self.lock:
            if not self.holds_lease(execution_id, token):
                return None
            rows = self.tables.admissions
            own = next((a for a in rows.values() if (a.execution_id, a.step_key) == (execution_id, step_key)), None)
            if own is not None and own.admitted_at is not None:
                return True, own.admitted_at
            now = self.clock()
            start = now - timedelta(seconds=window)
            of_key = [a for a in rows.values() if a.key == key]
            admitted = [(a.admitted_at, a.units) for a in of_key if a.admitted_at and a.admitted_at > start]
            place = (own.requested_at, own.id) if own is not None else (now, self.tables.next_id)
            waiting = [a for a in of_key if a.admitted_at is None and self._waits(a)]
            ahead = [a.units for a in sorted(waiting, key=_place) if _place(a) < place]
            at = admission_time(now, admitted, ahead, units, limit, window)
            if own is None:
                own = MemoryAdmission(self.tables.next_id, key, execution_id, step_key, units, now)
                self.tables.next_id += 1
                rows[own.id] = own
            if at > now:
                return False, at
            own.admitted_at, own.expires_at = now, now + timedelta(seconds=window)
            return True, now

    def _waits(self, admission: MemoryAdmission) -> bool:
        """Whether the admission's execution is unfinished (its waiting request holds its place)."""
        execution = self.tables.executions.get(admission.execution_id or "")
        return execution is not None and execution.status in RUNNABLE

    def drop_spent_admissions(self, limit: int) -> int:
        with self.lock:
            now, rows = self.clock(), self.tables.admissions
            spent = [
                pk
                for pk, a in rows.items()
                if (a.admitted_at is None or (a.expires_at is not None and a.expires_at <= now)) and not self._waits(a)
            ][:limit]
            for pk in spent:
                del rows[pk]
            return len(spent)

    def admissions(self, key: str) -> list[MemoryAdmission]:
        """The key's admissions and waiting requests, in request order (for tests and the tester)."""
        with self.lock:
            found = [a for a in self.tables.admissions.values() if a.key == key]
            return clone(sorted(found, key=lambda a: (a.requested_at, a.id)))


def _place(admission: MemoryAdmission) -> tuple[datetime, int]:
    return admission.requested_at, admission.id
