"""The ORM storage's concurrency keys: the unfinished runs of a key, and the key's lock.

Concurrency: every decision about a key runs under ``lock_slots``: on PostgreSQL a
transaction-level advisory lock on a hash of (workflow, key) (two keys that share a hash
only take turns); SQLite's IMMEDIATE transactions take the database's write lock at BEGIN,
which serialises writers already.
"""

from __future__ import annotations

from django.db.models import Count, Max, Q

from durableflow.engine.states import RUNNABLE
from durableflow.models.executions import status_in
from durableflow.orm.core import OrmCore

__all__ = ["OrmSlots"]


class OrmSlots(OrmCore):
    """Concurrency keys on the ``Execution`` rows (a part of ``OrmStorage``)."""

    def _key_runs(self, workflow: str, key: str):
        return self._executions().filter(status_in(RUNNABLE), workflow=workflow, concurrency_key=key)

    def lock_slots(self, workflow: str, key: str) -> None:
        connection = self.connection
        if connection.vendor != "postgresql":
            return
        with connection.cursor() as cursor:
            # Two int4 hashes: the (int, int) form of the lock, so that durableflow's keys do not
            # share a space with a project's own one-bigint advisory locks.
            cursor.execute("SELECT pg_advisory_xact_lock(hashtext(%s), hashtext(%s))", [workflow, key])

    def slots(self, workflow: str, key: str) -> tuple[int, int, int]:
        found = self._key_runs(workflow, key).aggregate(
            holders=Count("id", filter=Q(concurrency_ticket__isnull=True)),
            queued=Count("id", filter=Q(concurrency_ticket__isnull=False)),
            last=Max("concurrency_ticket"),
        )
        return found["holders"], found["queued"], found["last"] or 0

    def queued_runs(self, workflow: str, key: str, limit: int) -> list[tuple[str, str]]:
        rows = self._key_runs(workflow, key).filter(concurrency_ticket__isnull=False).order_by("concurrency_ticket")
        return list(rows.values_list("id", "queue")[:limit])

    def queued_keys(self, limit: int) -> list[tuple[str, str]]:
        rows = (
            self._executions()
            .filter(status_in(RUNNABLE), concurrency_key__isnull=False, concurrency_ticket__isnull=False)
            .order_by()
            .values_list("workflow", "concurrency_key")
            .distinct()
        )
        return list(rows[:limit])
