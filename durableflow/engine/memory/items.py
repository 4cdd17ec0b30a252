"""The in-memory storage's step bodies run as their own tasks (map items, run(queue=))."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from durableflow.engine import predicates
from durableflow.engine.memory.clone import clone
from durableflow.engine.memory.core import MemoryCore
from durableflow.engine.states import RUNNABLE, STEP_UNFINISHED, StepStatus
from durableflow.engine.storage import LEFT, ItemRecorded

__all__ = ["MemoryItems"]

ITEM = "item"
_UNFINISHED = STEP_UNFINISHED


class MemoryItems(MemoryCore):
    """Item records in memory (a part of ``InMemoryStorage``)."""

    def _items(self, execution_id: str):
        return [r for r in self.tables.steps.get(execution_id, {}).values() if r.kind == ITEM]

    def claim_item(self, execution_id: str, key: str, lease_seconds: float) -> tuple[int, dict[str, Any]] | None:
        with self.lock:
            execution = self.tables.executions.get(execution_id)
            record = self.tables.steps.get(execution_id, {}).get(key)
            if execution is None or execution.status not in RUNNABLE or record is None or record.kind != ITEM:
                return None
            now = self.clock()
            if not predicates.holds(predicates.ITEM_CLAIMABLE, record, now, {"lease_seconds": lease_seconds}):
                return None
            record.status, record.attempts, record.started_at = StepStatus.RUNNING, record.attempts + 1, now
            return record.attempts, clone(record.meta)

    def record_item(
        self,
        execution_id: str,
        key: str,
        attempt: int,
        fields: dict[str, Any],
        *,
        step: str,
        wake: dict[str, dict[str, Any]],
    ) -> ItemRecorded | None:
        with self.lock:
            if not self.finish_item(execution_id, key, attempt, fields):
                return None
            counted = self.tables.steps.get(execution_id, {}).get(step)
            left = None if counted is None else counted.meta.get(LEFT)
            if counted is None or not isinstance(left, int) or left <= 0:
                return ItemRecorded(None)
            counted.meta = {**counted.meta, LEFT: left - 1}
            if left > 1:
                return ItemRecorded(left - 1)
            marked = self.mark_executions([execution_id], wake)
            return ItemRecorded(0, (marked[0][1], marked[0][2]) if marked else None)

    def finish_item(self, execution_id: str, key: str, attempt: int, values: dict[str, Any]) -> bool:
        with self.lock:
            record = self.tables.steps.get(execution_id, {}).get(key)
            if record is None or record.status != StepStatus.RUNNING or record.attempts != attempt:
                return False
            return bool(self.update_step(execution_id, key, values))

    def send_next_item(self, execution_id: str) -> tuple[str, str] | None:
        with self.lock:
            for record in self._items(execution_id):
                if record.status == StepStatus.WAITING and record.started_at is None:
                    record.started_at = self.clock()
                    return record.key, record.meta.get("queue", "")
        return None

    def items_left(self, execution_id: str) -> int:
        with self.lock:
            return sum(1 for record in self._items(execution_id) if record.status in _UNFINISHED)

    def lock_stale_items(self, resend_after: float, limit: int) -> list[tuple[str, str, str]]:
        now = self.clock()
        overdue = now - timedelta(seconds=resend_after)
        with self.lock:
            stale = sorted(
                (
                    (record.started_at, execution_id, record)
                    for execution_id, steps in self.tables.steps.items()
                    for record in steps.values()
                    if self.tables.executions[execution_id].status in RUNNABLE
                    and record.kind == ITEM
                    and record.status in _UNFINISHED
                    and record.started_at is not None
                    and record.started_at < overdue
                ),
                key=lambda row: row[0],
            )[:limit]
            for _, _, record in stale:
                record.status, record.started_at = StepStatus.WAITING, now
            return [(execution_id, record.key, record.meta.get("queue", "")) for _, execution_id, record in stale]
