"""The ORM storage's stores: ``Store`` rows, the ledger of applied steps and store waiters.

Concurrency: a change locks its store row (``SELECT ... FOR UPDATE`` on PostgreSQL; SQLite
has no row locks, and its IMMEDIATE transactions take the write lock at BEGIN, which
serialises writers) and then writes it with a compare-and-set on (instance id, version), so
that even a database whose locks do not hold cannot lose an update: a write that matches
nothing is retried by the engine. The ledger's unique (execution, key) makes a step's
change happen once, whoever races to apply it.
"""

from __future__ import annotations

import json
from typing import Any, Iterable

from durableflow.models import Store, StoreLedger, StoreWaiter
from durableflow.orm.core import OrmCore
from durableflow.orm.sql import fenced_insert

__all__ = ["OrmStores"]

_IN_BATCH = 500


class OrmStores(OrmCore):
    """Stores, their ledger and their waiters on the models (a part of ``OrmStorage``)."""

    def _stores(self):
        return Store.objects.using(self.alias)

    def _waiters(self):
        return StoreWaiter.objects.using(self.alias)

    def get_store(self, name: str, store_id: str) -> Store | None:
        return self._stores().filter(name=name, store_id=store_id).first()

    def lock_store(self, name: str, store_id: str) -> Store | None:
        # FOR UPDATE: two workers changing one store take turns; the second reads the first's state.
        return self._stores().select_for_update().filter(name=name, store_id=store_id).first()

    def create_store(self, fields: dict[str, Any]) -> None:
        # ON CONFLICT DO NOTHING (INSERT OR IGNORE): a creator that loses the race reads the
        # winner's row; the caller's transaction stays usable.
        self._stores().bulk_create([Store(**fields)], ignore_conflicts=True)

    def write_store(self, name: str, store_id: str, fields: dict[str, Any], *, instance_id: str, version: int) -> int:
        rows = self._stores().filter(name=name, store_id=store_id, instance_id=instance_id, version=version)
        return rows.update(**self._values(fields))

    def delete_store(self, name: str, store_id: str, *, instance_id: str, version: int) -> int:
        rows = self._stores().filter(name=name, store_id=store_id, instance_id=instance_id, version=version)
        return rows.delete()[0]

    def get_applied(self, execution_id: str, key: str) -> StoreLedger | None:
        return StoreLedger.objects.using(self.alias).filter(execution_id=execution_id, key=key).first()

    def record_applied(self, fields: dict[str, Any], *, token: str) -> bool:
        # One statement fences and records: inserted only while the lease is the step's, and
        # once per (execution, key). Run in the store's transaction, so a zombie's change rolls back.
        sql = fenced_insert(self.connection, StoreLedger, _LEDGER_FIELDS, _LEDGER_CASTS, ("execution_id", "key"))
        params = {**fields, "outcome": json.dumps(fields["outcome"], separators=(",", ":")), "token": token}
        with self.connection.cursor() as cursor:
            cursor.execute(sql, params)
            return cursor.rowcount == 1

    def store_waiters(self, name: str, store_id: str) -> list[StoreWaiter]:
        return list(self._waiters().filter(name=name, store_id=store_id, woken_at__isnull=True).order_by("id"))

    def put_store_waiter(self, fields: dict[str, Any]) -> None:
        self.delete_store_waiter(fields["execution_id"], fields["key"])
        self._waiters().create(**fields)

    def delete_store_waiter(self, execution_id: str, key: str) -> int:
        return self._waiters().filter(execution_id=execution_id, key=key).delete()[0]

    def wake_store_waiters(self, ids: Iterable[int]) -> int:
        ids, count = list(ids), 0
        for start in range(0, len(ids), _IN_BATCH):
            count += self._waiters().filter(pk__in=ids[start : start + _IN_BATCH]).update(woken_at=self._now())
        return count

    def woken_waiter_executions(self, statuses: Iterable[str], limit: int) -> list[str]:
        rows = self._waiters().filter(
            woken_at__isnull=False,
            execution__status__in=list(statuses),
            execution__waiting_for__kind="store",
        )
        return list(rows.order_by().values_list("execution_id", flat=True).distinct()[:limit])

    def drop_woken_waiters(self, statuses: Iterable[str]) -> int:
        rows = self._waiters().filter(woken_at__isnull=False, execution__status__in=list(statuses))
        ids = list(rows.values_list("pk", flat=True)[:_IN_BATCH])
        return self._waiters().filter(pk__in=ids).delete()[0] if ids else 0


_LEDGER_FIELDS = ("execution_id", "key", "kind", "name", "store_id", "instance_id", "version", "outcome")
_LEDGER_CASTS = {"version": "::bigint", "outcome": "::jsonb"}
