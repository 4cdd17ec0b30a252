"""The in-memory storage's stores: store rows, the ledger of applied steps and store waiters.

The storage's one lock serialises every call, as SQLite serialises writers: ``lock_store``
has nothing more to lock.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Iterable

from durableflow.engine.memory.clone import clone
from durableflow.engine.memory.core import MemoryCore

__all__ = ["MemoryStore", "MemoryLedgerEntry", "MemoryStoreWaiter", "MemoryStores"]


@dataclass
class MemoryStore:
    name: str
    store_id: str
    instance_id: str
    version: int = 0
    state: Any = None
    has_waiters: bool = False
    created_at: datetime | None = None
    updated_at: datetime | None = None


@dataclass
class MemoryLedgerEntry:
    execution_id: str
    key: str
    kind: str
    name: str
    store_id: str
    instance_id: str
    version: int
    outcome: Any = None
    applied_at: datetime | None = None


@dataclass
class MemoryStoreWaiter:
    id: int
    execution_id: str
    key: str
    name: str
    store_id: str
    instance_id: str
    version: int
    reads: list[dict[str, Any]] = field(default_factory=list)
    created_at: datetime | None = None
    woken_at: datetime | None = None


_waiter_ids = itertools.count(1)


class MemoryStores(MemoryCore):
    """Stores in the tables ``stores``, ``store_ledger`` and ``store_waiters`` (a part of
    ``InMemoryStorage``)."""

    def get_store(self, name: str, store_id: str) -> MemoryStore | None:
        with self.lock:
            return clone(self.tables.stores.get((name, store_id)))

    def lock_store(self, name: str, store_id: str) -> MemoryStore | None:
        return self.get_store(name, store_id)

    def create_store(self, fields: dict[str, Any]) -> None:
        with self.lock:
            key = (fields["name"], fields["store_id"])
            if key not in self.tables.stores:
                now = self.clock()
                values = {name: self._value(value) for name, value in fields.items()}
                self.tables.stores[key] = MemoryStore(**values, created_at=now, updated_at=now)

    def write_store(self, name: str, store_id: str, fields: dict[str, Any], *, instance_id: str, version: int) -> int:
        with self.lock:
            store = self.tables.stores.get((name, store_id))
            if store is None or (store.instance_id, store.version) != (instance_id, version):
                return 0
            for field_name, value in fields.items():
                if not hasattr(store, field_name):
                    raise TypeError(f"unknown store field {field_name!r}")
                setattr(store, field_name, self._value(value))
            return 1

    def delete_store(self, name: str, store_id: str, *, instance_id: str, version: int) -> int:
        with self.lock:
            store = self.tables.stores.get((name, store_id))
            if store is None or (store.instance_id, store.version) != (instance_id, version):
                return 0
            del self.tables.stores[(name, store_id)]
            return 1

    def get_applied(self, execution_id: str, key: str) -> MemoryLedgerEntry | None:
        with self.lock:
            return clone(self.tables.store_ledger.get((execution_id, key)))

    def record_applied(self, fields: dict[str, Any], *, token: str) -> bool:
        with self.lock:
            key = (fields["execution_id"], fields["key"])
            if key in self.tables.store_ledger or not self.holds_lease(fields["execution_id"], token):
                return False
            entry = MemoryLedgerEntry(**{name: self._value(value) for name, value in fields.items()})
            entry.applied_at = self.clock()
            self.tables.store_ledger[key] = entry
            return True

    def store_waiters(self, name: str, store_id: str) -> list[MemoryStoreWaiter]:
        with self.lock:
            waiters = self.tables.store_waiters.values()
            found = [w for w in waiters if (w.name, w.store_id) == (name, store_id) and w.woken_at is None]
            return clone(sorted(found, key=lambda w: w.id))

    def put_store_waiter(self, fields: dict[str, Any]) -> None:
        with self.lock:
            waiter = MemoryStoreWaiter(
                id=next(_waiter_ids), **{name: self._value(value) for name, value in fields.items()}
            )
            waiter.created_at = self.clock()
            self.tables.store_waiters[(waiter.execution_id, waiter.key)] = waiter

    def delete_store_waiter(self, execution_id: str, key: str) -> int:
        with self.lock:
            return 1 if self.tables.store_waiters.pop((execution_id, key), None) is not None else 0

    def wake_store_waiters(self, ids: Iterable[int]) -> int:
        wanted, count = set(ids), 0
        with self.lock:
            for waiter in self.tables.store_waiters.values():
                if waiter.id in wanted:
                    waiter.woken_at = self.clock()
                    count += 1
        return count

    def woken_waiter_executions(self, statuses: Iterable[str], limit: int) -> list[str]:
        wanted = set(statuses)
        with self.lock:
            found = []
            for waiter in self.tables.store_waiters.values():
                execution = self.tables.executions.get(waiter.execution_id)
                if (
                    waiter.woken_at is not None
                    and execution is not None
                    and execution.status in wanted
                    and (execution.waiting_for or {}).get("kind") == "store"
                    and execution.id not in found
                ):
                    found.append(execution.id)
            return found[:limit]

    def drop_woken_waiters(self, statuses: Iterable[str]) -> int:
        wanted = set(statuses)
        with self.lock:
            executions = self.tables.executions
            drop = [
                key
                for key, waiter in self.tables.store_waiters.items()
                if waiter.woken_at is not None
                and waiter.execution_id in executions
                and executions[waiter.execution_id].status in wanted
            ]
            for key in drop:
                del self.tables.store_waiters[key]
            return len(drop)
