"""The in-memory storage's part for sagas and metadata: metadata read under the lock, journal copies."""

from __future__ import annotations

from typing import Any

from durableflow.engine.memory.clone import clone
from durableflow.engine.memory.core import MemoryCore
from durableflow.engine.records import StepRecordData

__all__ = ["MemorySagas"]


class MemorySagas(MemoryCore):
    """Metadata and journal copies in memory (a part of ``InMemoryStorage``)."""

    def lock_metadata(self, execution_id: str) -> dict[str, Any] | None:
        # ``atomic()`` holds the storage's lock for the whole transaction: the row is "locked".
        with self.lock:
            execution = self.tables.executions.get(execution_id)
            return None if execution is None else clone(execution.metadata or {})

    def add_steps(self, execution_id: str, records: list[StepRecordData]) -> None:
        with self.lock:
            steps = self.tables.steps.setdefault(execution_id, {})
            for record in records:
                if record.key in steps:
                    raise ValueError(f"step {record.key!r} of execution {execution_id} is recorded already")
                steps[record.key] = clone(record)
