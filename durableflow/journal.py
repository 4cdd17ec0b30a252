"""The ORM journal: leases, fenced step writes and outcomes in the project's database.

Cost of a delivery: one UPDATE to claim the lease, one SELECT of the execution, one SELECT
of its journal; then one single-statement write per live step (no reads), and one UPDATE
for the outcome. Every write carries the lease token, so a delivery that lost its lease
(a paused "zombie" worker) cannot change anything.
"""

from __future__ import annotations

import json
import logging
import time
import uuid
from datetime import datetime, timedelta
from typing import Any

from django.db import connection, transaction
from django.db.models import Exists, F, OuterRef
from django.db.models.functions import Coalesce, Now

from durableflow.engine.journal import (
    Claim,
    ExecutionStatus,
    LeaseLost,
    Outcome,
    StepConflict,
    StepRecordData,
    outcome_fields,
    same_outcome,
)
from durableflow.leases import LeaseKeeper, keeper, lease_until
from durableflow.models import Execution, StepRecord

__all__ = ["OrmJournal"]

logger = logging.getLogger("durableflow.journal")

_RECORD_FIELDS = ("key", "kind", "status", "attempts", "value", "error", "meta", "started_at", "finished_at")
_JSON_FIELDS = ("value", "error", "meta")


class OrmJournal:
    """One delivery's lease on one execution row.

    Concurrency: any number of deliveries of one execution may run at once (duplicate or
    late messages, a sweep re-send, a zombie worker). The claim is a compare-and-set on the
    lease, so one wins; every later write names the winner's token, so the others' writes
    match no row and are rejected.
    """

    def __init__(
        self,
        execution_id: str,
        *,
        lease_seconds: float,
        lease_keeper: LeaseKeeper = keeper,
        clock_offset: timedelta = timedelta(0),
        on_enqueue=None,
    ):
        self.execution_id = execution_id
        self.token = uuid.uuid4().hex
        self.lease_seconds = lease_seconds
        self.offset = clock_offset
        self.on_enqueue = on_enqueue
        self._keeper = lease_keeper
        self._lease = None
        self._queue = ""
        self._claimed_at: tuple[datetime, float] | None = None

    # Journal protocol -----------------------------------------------------------------

    def claim(self) -> Claim | None:
        now = Now() + self.offset if self.offset else Now()
        claimed = (
            Execution.objects.filter(pk=self.execution_id)
            .claimable(now)
            .update(
                status=ExecutionStatus.RUNNING,
                lease_token=self.token,
                lease_expires_at=lease_until(self.lease_seconds, self.offset),
                deliveries=F("deliveries") + 1,
                started_at=Coalesce("started_at", now),
            )
        )
        if not claimed:
            return None
        self._lease = self._keeper.hold(self.execution_id, self.token, self.lease_seconds, self.offset)
        row = Execution.objects.values(
            "workflow", "version", "params", "parent_id", "root_id", "deliveries",
            "lease_token", "lease_expires_at", "waiting_for", "queue",
        ).get(pk=self.execution_id)
        if row["lease_token"] != self.token:  # taken over between the claim and the read
            raise LeaseLost(self.execution_id)
        # The database clock, read without another query: the claim set expiry = now + lease.
        db_now = row["lease_expires_at"] - timedelta(seconds=self.lease_seconds)
        self._claimed_at = (db_now, time.monotonic())
        self._queue = row["queue"]
        records = {
            values["key"]: StepRecordData(**values)
            for values in StepRecord.objects.filter(execution_id=self.execution_id)
            .order_by("id")
            .values(*_RECORD_FIELDS)
        }
        return Claim(
            execution_id=self.execution_id,
            workflow=row["workflow"],
            version=row["version"],
            params=row["params"],
            records=records,
            now=db_now,
            delivery=row["deliveries"],
            parent_id=row["parent_id"],
            root_id=row["root_id"],
            waiting_for=row["waiting_for"],
        )

    def now(self) -> datetime:
        db_now, at = self._claimed_at
        return db_now + timedelta(seconds=time.monotonic() - at)

    def lease_lost(self) -> bool:
        return self._lease is not None and self._lease.lost

    def write_step(self, record: StepRecordData, *, new: bool) -> None:
        if new:
            if self._insert(record):
                return
            self._explain_rejected_insert(record)
            return
        updated = (
            StepRecord.objects.filter(execution_id=self.execution_id, key=record.key)
            .filter(Exists(Execution.objects.filter(pk=OuterRef("execution_id"), lease_token=self.token)))
            .update(**{name: getattr(record, name) for name in _RECORD_FIELDS if name != "key"})
        )
        if not updated:
            self._rejected(f"update of step {record.key!r}")

    def finish(self, outcome: Outcome) -> None:
        fields, enqueue = outcome_fields(outcome, self.now())
        updated = Execution.objects.filter(pk=self.execution_id, lease_token=self.token).update(**fields)
        if not updated:
            self._rejected(f"outcome {type(outcome).__name__}")
        if enqueue and self.on_enqueue is not None:
            transaction.on_commit(lambda: self.on_enqueue(self.execution_id, self._queue))

    def close(self) -> None:
        if self._lease is not None:
            self._keeper.release(self._lease)

    # Fenced writes --------------------------------------------------------------------

    def _insert(self, record: StepRecordData) -> bool:
        """INSERT ... SELECT ... WHERE <lease held>: one statement, so one write transaction."""
        sql, params = _fenced_insert_sql(record, self.execution_id, self.token)
        with connection.cursor() as cursor:
            cursor.execute(sql, params)
            return cursor.rowcount == 1

    def _explain_rejected_insert(self, record: StepRecordData) -> None:
        """Nothing was inserted: either the lease is gone or the key is already recorded."""
        if not Execution.objects.filter(pk=self.execution_id, lease_token=self.token).exists():
            self._rejected(f"step {record.key!r}")
        existing = (
            StepRecord.objects.filter(execution_id=self.execution_id, key=record.key).values(*_RECORD_FIELDS).first()
        )
        if existing is None:  # pragma: no cover - the row was deleted under us (prune)
            raise StepConflict(f"step {record.key!r} could not be recorded")
        if not same_outcome(StepRecordData(**existing), record):
            raise StepConflict(f"step {record.key!r} is already recorded with another outcome")

    def _rejected(self, what: str):
        logger.warning(
            "stale write rejected: %s of execution %s (lease %s is no longer held)", what, self.execution_id, self.token
        )
        if self._lease is not None:
            self._lease.lost = True
        raise LeaseLost(self.execution_id)


def _fenced_insert_sql(record: StepRecordData, execution_id: str, token: str) -> tuple[str, list[Any]]:
    ops, qn = connection.ops, connection.ops.quote_name
    step_table, execution_table = qn(StepRecord._meta.db_table), qn(Execution._meta.db_table)
    columns = ["execution_id", *_RECORD_FIELDS]
    json_cast = "::jsonb" if connection.vendor == "postgresql" else ""
    placeholders = ["%s" + (json_cast if name in _JSON_FIELDS else "") for name in columns]
    params: list[Any] = [execution_id]
    for name in _RECORD_FIELDS:
        value = getattr(record, name)
        if name == "meta":
            value = _json(value or {})
        elif name in _JSON_FIELDS:
            value = None if value is None else _json(value)
        elif isinstance(value, datetime):
            value = ops.adapt_datetimefield_value(value)
        params.append(value)
    sql = (
        f"INSERT INTO {step_table} ({', '.join(qn(c) for c in columns)}) "
        f"SELECT {', '.join(placeholders)} "
        f"WHERE EXISTS (SELECT 1 FROM {execution_table} WHERE {qn('id')} = %s AND {qn('lease_token')} = %s) "
        f"ON CONFLICT ({qn('execution_id')}, {qn('key')}) DO NOTHING"
    )
    return sql, [*params, execution_id, token]


def _json(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)
