"""The ORM journal: leases, fenced step writes and outcomes in the project's database.

Cost of a delivery: one UPDATE ... RETURNING to claim the lease and read the execution,
one SELECT of its journal; then one single-statement write per live step (no reads), and
one UPDATE for the outcome. Every write carries the lease token, so a delivery that lost its lease
(a paused "zombie" worker) cannot change anything.
"""

from __future__ import annotations

import logging
import time
import uuid
from datetime import datetime, timedelta

from django.db import DEFAULT_DB_ALIAS, connections, transaction
from django.db.models import Exists, OuterRef

from durableflow.engine.journal import (
    Claim,
    LeaseLost,
    Outcome,
    StepConflict,
    StepRecordData,
    outcome_fields,
    same_outcome,
)
from durableflow.leases import LeaseKeeper, keeper
from durableflow.models import Execution, StepRecord
from durableflow.sql import RECORD_FIELDS, decode_claim, decode_record, statements
from durableflow.sql import cursor as sql_cursor

__all__ = ["OrmJournal"]

logger = logging.getLogger("durableflow.journal")


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
        self._db = self._sql = self._cursor = None

    # Journal protocol -----------------------------------------------------------------

    def claim(self) -> Claim | None:
        # One database wrapper and one cursor for the whole delivery (one thread): the
        # step writes reuse them instead of going through the connection proxy each time.
        self._db = connections[DEFAULT_DB_ALIAS]
        self._sql = sql = statements(self._db)
        self._cursor = cursor = sql_cursor(self._db)
        offset = self.offset.total_seconds()
        cursor.execute(sql.claim_sql, sql.claim_params(self.execution_id, self.token, self.lease_seconds, offset))
        row = cursor.fetchone()
        if row is None:
            return None
        self._lease = self._keeper.hold(self.execution_id, self.token, self.lease_seconds, self.offset)
        execution, db_now = decode_claim(row)
        cursor.execute(sql.journal_sql, {"id": self.execution_id})
        records = {record.key: record for record in map(decode_record, cursor.fetchall())}
        self._claimed_at = (db_now, time.monotonic())
        self._queue = execution["queue"]
        return Claim(
            execution_id=self.execution_id,
            workflow=execution["workflow"],
            version=execution["version"],
            params=execution["params"],
            records=records,
            now=db_now,
            delivery=execution["deliveries"],
            parent_id=execution["parent_id"],
            root_id=execution["root_id"],
            waiting_for=execution["waiting_for"],
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
            .update(**{name: getattr(record, name) for name in RECORD_FIELDS if name != "key"})
        )
        if not updated:
            self._rejected(f"update of step {record.key!r}")

    def finish(self, outcome: Outcome) -> None:
        fields, enqueue = outcome_fields(outcome, self.now())
        sql, params = self._sql.outcome(fields, self.execution_id, self.token, self._db.ops.adapt_datetimefield_value)
        self._cursor.execute(sql, params)
        if self._cursor.rowcount != 1:
            self._rejected(f"outcome {type(outcome).__name__}")
        if enqueue and self.on_enqueue is not None:
            transaction.on_commit(lambda: self.on_enqueue(self.execution_id, self._queue))

    def close(self) -> None:
        if self._lease is not None:
            self._keeper.release(self._lease)
        if self._cursor is not None:
            self._cursor.close()
            self._cursor = None

    # Fenced writes --------------------------------------------------------------------

    def _insert(self, record: StepRecordData) -> bool:
        params = self._sql.insert_params(record, self.execution_id, self.token, self._db.ops.adapt_datetimefield_value)
        self._cursor.execute(self._sql.insert_sql, params)
        return self._cursor.rowcount == 1

    def _explain_rejected_insert(self, record: StepRecordData) -> None:
        """Nothing was inserted: either the lease is gone or the key is already recorded."""
        if not Execution.objects.filter(pk=self.execution_id, lease_token=self.token).exists():
            self._rejected(f"step {record.key!r}")
        existing = (
            StepRecord.objects.filter(execution_id=self.execution_id, key=record.key).values(*RECORD_FIELDS).first()
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
