"""One delivery's lease on one execution, written once over the storage protocol.

A ``Journal`` claims the lease, hands the engine the execution and its step records (read
once), makes each step write fenced by the lease and records the delivery's outcome. The
storage only answers whether each conditional write matched; what a rejected write means
(the lease is gone, or the step is already recorded with another outcome) is decided here.
"""

from __future__ import annotations

import logging
import uuid
from datetime import datetime, timedelta

from durableflow import dispatch
from durableflow.engine.records import (
    RECORD_FIELDS,
    Claim,
    LeaseLost,
    Outcome,
    StepConflict,
    StepRecordData,
    outcome_fields,
    same_outcome,
)
from durableflow.engine.storage import Storage

__all__ = ["Journal"]

logger = logging.getLogger("durableflow.journal")


class Journal:
    """One delivery's lease on one execution.

    Concurrency: any number of deliveries of one execution may run at once (duplicate or
    late messages, a sweep re-send, a zombie worker). The claim is a compare-and-set on the
    lease, so one wins; every later write names the winner's token, so the others' writes
    match nothing and are rejected.
    """

    def __init__(self, storage: Storage, execution_id: str, *, lease_seconds: float):
        self.storage = storage
        self.execution_id = execution_id
        self.token = uuid.uuid4().hex
        self.lease_seconds = lease_seconds
        self.queue = ""
        self._lease = None
        self._lost = False
        self._clock: tuple[datetime, float] | None = None

    def claim(self) -> Claim | None:
        """Take the lease if the execution is runnable and unleased; load it and its records."""
        row = self.storage.claim(self.execution_id, self.token, self.lease_seconds)
        if row is None:
            return None
        self._lease = self.storage.keep_lease(self.execution_id, self.token, self.lease_seconds)
        self._clock = (row.now, self.storage.monotonic())
        execution = row.execution
        self.queue = execution["queue"]
        return Claim(
            execution_id=self.execution_id,
            workflow=execution["workflow"],
            version=execution["version"],
            params=execution["params"],
            records=row.records,
            now=row.now,
            delivery=execution["deliveries"],
            parent_id=execution["parent_id"],
            root_id=execution["root_id"],
            waiting_for=execution["waiting_for"],
            queue=execution["queue"],
        )

    def now(self) -> datetime:
        """The delivery's clock: the storage's clock at the claim, moved on locally."""
        claimed, at = self._clock
        return claimed + timedelta(seconds=self.storage.monotonic() - at)

    def lease_lost(self) -> bool:
        """True once the lease is known to be gone (a rejected write, a failed heartbeat)."""
        return self._lost or (self._lease is not None and self._lease.lost)

    def write_step(self, record: StepRecordData, *, new: bool) -> None:
        """Insert (``new``) or update one step record, fenced by the lease.

        Raises ``LeaseLost`` if another delivery holds the execution, ``StepConflict`` if the
        key is already recorded with another outcome.
        """
        storage = self.storage
        if not new:
            fields = {name: getattr(record, name) for name in RECORD_FIELDS if name != "key"}
            if not storage.update_step(self.execution_id, record.key, fields, token=self.token):
                self._rejected(f"update of step {record.key!r}")
            return
        if storage.insert_step(self.execution_id, self.token, record):
            return
        # Nothing was inserted: either the lease is gone or the key is already recorded.
        if not storage.holds_lease(self.execution_id, self.token):
            self._rejected(f"step {record.key!r}")
        existing = storage.get_step(self.execution_id, record.key)
        if existing is None:  # pragma: no cover - the row was deleted under us (prune)
            raise StepConflict(f"step {record.key!r} could not be recorded")
        if not same_outcome(existing, record):
            raise StepConflict(f"step {record.key!r} is already recorded with another outcome")

    def write_exclusive(self, record: StepRecordData, previous: StepRecordData | None) -> None:
        """Write ``record`` only as the change from ``previous`` (``None``: the key has no record yet).

        A transactional step's record: it commits with the body's writes, so this delivery must be
        the one that records it. An insert that finds the key taken, or an update that finds the
        record no longer in ``previous.status``, is not "already done" as for ``write_step``: it
        raises ``StepConflict`` even when the other record says the same thing (else both bodies'
        writes would commit), or ``LeaseLost`` if the lease is gone.
        """
        storage = self.storage
        if previous is None:
            written = storage.insert_step(self.execution_id, self.token, record)
        else:
            fields = {name: getattr(record, name) for name in RECORD_FIELDS if name != "key"}
            written = storage.update_step(
                self.execution_id, record.key, fields, token=self.token, statuses=[previous.status]
            )
        if written:
            return
        if not storage.holds_lease(self.execution_id, self.token):
            self._rejected(f"step {record.key!r}")
        raise StepConflict(f"step {record.key!r} was recorded by another delivery first")

    def finish(self, outcome: Outcome) -> None:
        """Record the delivery's outcome and release the lease (fenced; ``LeaseLost``)."""
        fields, enqueue = outcome_fields(outcome, self.now())
        if not self.storage.update_execution(self.execution_id, fields, token=self.token):
            self._rejected(f"outcome {type(outcome).__name__}")
        if enqueue:
            self.storage.enqueue(dispatch.DELIVER, (self.execution_id,), self.queue)

    def close(self) -> None:
        """The delivery is over, whatever happened: stop renewing the lease."""
        if self._lease is not None:
            self.storage.release_lease(self._lease)
            self._lease = None

    def _rejected(self, what: str):
        logger.warning(
            "stale write rejected: %s of execution %s (lease %s is no longer held)", what, self.execution_id, self.token
        )
        self._lost = True
        raise LeaseLost(self.execution_id)
