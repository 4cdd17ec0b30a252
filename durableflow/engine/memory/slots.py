"""The in-memory storage's concurrency keys (its lock serialises every transaction)."""

from __future__ import annotations

from durableflow.engine.memory.core import MemoryCore
from durableflow.engine.states import RUNNABLE

__all__ = ["MemorySlots"]


class MemorySlots(MemoryCore):
    """Concurrency keys on the execution rows in memory (a part of ``InMemoryStorage``)."""

    def _key_runs(self, workflow: str, key: str):
        return [
            e
            for e in self.tables.executions.values()
            if e.status in RUNNABLE and e.workflow == workflow and e.concurrency_key == key
        ]

    def lock_slots(self, workflow: str, key: str) -> None:
        return None  # atomic() holds the storage's lock for the whole transaction

    def slots(self, workflow: str, key: str) -> tuple[int, int, int]:
        with self.lock:
            runs = self._key_runs(workflow, key)
            tickets = [e.concurrency_ticket for e in runs if e.concurrency_ticket is not None]
            return len(runs) - len(tickets), len(tickets), max(tickets, default=0)

    def queued_runs(self, workflow: str, key: str, limit: int) -> list[tuple[str, str]]:
        with self.lock:
            queued = sorted(
                (e for e in self._key_runs(workflow, key) if e.concurrency_ticket is not None),
                key=lambda e: e.concurrency_ticket,
            )
            return [(e.id, e.queue) for e in queued[:limit]]

    def queued_keys(self, limit: int) -> list[tuple[str, str]]:
        with self.lock:
            keys = dict.fromkeys(
                (e.workflow, e.concurrency_key)
                for e in self.tables.executions.values()
                if e.status in RUNNABLE and e.concurrency_key is not None and e.concurrency_ticket is not None
            )
            return list(keys)[:limit]
