"""One delivery's lease on one execution, written once over the storage protocol.

A ``Journal`` claims the lease, hands the engine the execution and its step records (read
once), makes each step write fenced by the lease and records the delivery's outcome. The
storage only answers whether each conditional write matched; what a rejected write means
(the lease is gone, or the step is already recorded with another outcome) is decided here.
"""

from __future__ import annotations

import uuid
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from durableflow.engine import faults, holders, logs, names, observing
from durableflow.engine.records import (
    ENDED,
    RECORD_FIELDS,
    Claim,
    Continued,
    LeaseLost,
    Outcome,
    Requeued,
    StepConflict,
    StepRecordData,
    outcome_fields,
    same_outcome,
)
from durableflow.engine.states import LEASED, TERMINAL, ExecutionStatus
from durableflow.engine.storage import Storage

if TYPE_CHECKING:
    from durableflow.engine.verbs import Engine

__all__ = ["Journal"]

logger = logs.logger("durableflow.journal")


class Journal:
    """One delivery's lease on one execution.

    Concurrency: any number of deliveries of one execution may run at once (duplicate or
    late messages, a sweep re-send, a zombie worker). The claim is a compare-and-set on the
    lease, so one wins; every later write names the winner's token, so the others' writes
    match nothing and are rejected.

    Its storage is guarded (``durableflow.engine.faults``): a database failure in any of its
    operations raises ``StorageFault`` and is kept in ``fault``.
    """

    def __init__(
        self,
        storage: Storage,
        execution_id: str,
        *,
        lease_seconds: float,
        engine: Engine,
        lease_holders: holders.Holders | None = None,
        notify: observing.Notify | None = None,
    ):
        self.storage = faults.guard(storage)
        self.notify = notify  # told of the run's start, end and failed step attempts, after commit
        # Who claims (recorded with the lease), and who judges whether a holder found is gone.
        self.holders = lease_holders or holders.local()
        # The verbs a delivery needs beyond its own journal: starting children, waking the
        # executions that wait for this one to end.
        self.engine = engine
        self.execution_id = execution_id
        self.token = uuid.uuid4().hex
        self.lease_seconds = lease_seconds
        self.queue = ""
        self._lease = None
        self._lost = False
        self._clock: tuple[datetime, float] | None = None
        self.claimed: Claim | None = None

    def claim(self) -> Claim | None:
        """Take the lease if the execution is runnable and unleased (or leased by a holder that
        is gone: ``durableflow.engine.holders``); load it and its records."""
        row = self.storage.claim(self.execution_id, self.token, self.lease_seconds, holder=self.holders.text)
        if row is None:
            row = self._take_over()
            if row is None:
                return None
        # The delivery's clock starts from the claim's database time, read as close to it as
        # this process can: before the heartbeat is set up, so that it lags the database less.
        self._clock = (row.now, self.storage.monotonic())
        holders.hold(self.token)
        self._lease = self.storage.keep_lease(self.execution_id, self.token, self.lease_seconds)
        execution = row.execution
        self.queue = execution["queue"]
        self.claimed = Claim(
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
            cancel_requested=execution["cancel_requested"],
            seed=execution["seed"],
            lost=execution["lost_deliveries"],
            trace_context=execution["trace_context"],
        )
        logs.update(workflow=self.claimed.workflow)  # in the delivery's scope (Engine.deliver)
        if self.claimed.delivery == 1:  # the claim is committed: this is the run's start
            self._announce(observing.STARTED, status=ExecutionStatus.RUNNING)
        return self.claimed

    def _take_over(self):
        """After a claim that matched nothing: claim the lease from its holder if that is gone."""
        current = self.storage.get_execution(self.execution_id, ("status", "lease_token", "lease_holder"))
        if current is None or current.status not in LEASED or current.lease_token is None:
            return None
        if not self.holders.gone(current.lease_holder, current.lease_token):
            return None
        logger.warning(
            "execution %s: the holder of its lease (%s) is gone; taking the lease over",
            self.execution_id,
            current.lease_holder,
        )
        return self.storage.claim(
            self.execution_id, self.token, self.lease_seconds, holder=self.holders.text, take_over=current.lease_token
        )

    def now(self) -> datetime:
        """The delivery's clock: the storage's clock at the claim, moved on locally."""
        if self._clock is None:
            raise RuntimeError("a delivery's clock starts with its claim")
        claimed, at = self._clock
        return claimed + timedelta(seconds=self.storage.monotonic() - at)

    @property
    def fault(self) -> faults.StorageFault | None:
        """The first storage fault this delivery met (it ends the delivery), or None."""
        return self.storage.fault

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
            self._written(record)
            return
        if storage.insert_step(self.execution_id, self.token, record):
            self._written(record)
            return
        # Nothing was inserted: either the lease is gone or the key is already recorded.
        if not storage.holds_lease(self.execution_id, self.token):
            self._rejected(f"step {record.key!r}")
        existing = storage.get_step(self.execution_id, record.key)
        if existing is None:  # pragma: no cover - the row was deleted under us (prune)
            raise StepConflict(f"step {record.key!r} could not be recorded")
        if not same_outcome(existing, record):
            raise StepConflict(f"step {record.key!r} is already recorded with another outcome")

    def mark_compensable(self) -> None:
        """Mark the execution as having a compensation, before a compensable step's body runs.

        Fenced by the lease, and a write on the execution's row: a ``cancel()`` either comes
        first (this matches nothing: ``LeaseLost``, and the body never runs) or sees the mark
        and replays the run to compensate it.
        """
        if not self.storage.update_execution(self.execution_id, {"compensable": True}, token=self.token):
            self._rejected("compensable mark")

    def admit(self, key: str, limit: int, window: float, units: int, step: str) -> tuple[bool, datetime]:
        """Ask the shared limiter of ``key`` for ``units`` for ``step`` (``durableflow.engine.ratelimits``):
        ``(True, admitted_at)`` or ``(False, when a unit frees)``. Fenced by the lease (``LeaseLost``)."""
        answer = self.storage.admit(key, limit, window, units, self.execution_id, step, self.token)
        if answer is None:
            self._rejected(f"rate-limit admission of step {step!r}")
        return answer

    def write_chunk(self, stream_id: str, seq: int, chunk) -> None:
        """Store chunk ``seq`` of ``stream_id`` (``durableflow.engine.streams``), fenced by the lease.

        A chunk stored already at that position (by an earlier delivery of this run) is left as
        it is; ``LeaseLost`` if another delivery holds the execution.
        """
        if self.storage.write_chunk(self.execution_id, self.token, stream_id, seq, chunk, self.now()):
            return
        if not self.storage.holds_lease(self.execution_id, self.token):
            self._rejected(f"chunk {seq} of stream {stream_id!r}")

    def write_steps(self, records: list[StepRecordData]) -> None:
        """Insert several new records at once, fenced by the lease (``LeaseLost``, ``StepConflict``)."""
        if self.storage.insert_steps(self.execution_id, self.token, records):
            for record in records:
                self._written(record)
            return
        if not self.storage.holds_lease(self.execution_id, self.token):
            self._rejected(f"steps {records[0].key!r}...")
        raise StepConflict(f"steps {records[0].key!r}... are already recorded")

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
            self._written(record)
            return
        if not storage.holds_lease(self.execution_id, self.token):
            self._rejected(f"step {record.key!r}")
        raise StepConflict(f"step {record.key!r} was recorded by another delivery first")

    def finish(self, outcome: Outcome) -> Outcome:
        """Record the delivery's outcome and release the lease (fenced; ``LeaseLost``); return
        the outcome recorded.

        A park with a ``guard`` (see ``Suspended``) is one transaction with the guard: what it
        registers is rolled back with a rejected outcome, and if what it waits for happened
        already, the delivery ends as ``Requeued`` instead. ``continue_as_new`` starts the next
        execution in the transaction that completes this one.

        A wake-up that arrived while this delivery held the lease (an event, a finished child,
        the last item of a map: ``Engine.wake``) turns a suspension into a replay at once: what
        it suspended on may have changed after it looked. An execution that ends wakes the
        executions waiting for it, after the outcome is committed.
        """
        if self.claimed is None:
            raise RuntimeError("a delivery finishes only what it claimed")
        claim = self.claimed
        guard = getattr(outcome, "guard", None)
        limited = self.engine.limited(claim.workflow)
        if guard is None and not isinstance(outcome, Continued) and not limited:
            return self._finish(outcome)
        with self.storage.atomic():
            if guard is not None and not guard():
                outcome = Requeued("woken while parking")
            if isinstance(outcome, Continued):  # the new execution exists if and only if this one completed
                self.engine.continue_as(claim, outcome)
            finished = self._finish(outcome)
            if limited and isinstance(finished, ENDED):  # its slot is free with this commit
                row = self.storage.get_execution(self.execution_id, ("concurrency_key",))
                self.engine.free_slots(claim.workflow, row.concurrency_key)
            return finished

    def _finish(self, outcome: Outcome) -> Outcome:
        now = self.now()
        fields, enqueue = outcome_fields(outcome, now)
        woken = Requeued("woken while running")
        if_woken = outcome_fields(woken, now)[0] if fields["status"] == ExecutionStatus.WAITING else None
        row = self.storage.record_outcome(self.execution_id, self.token, fields, if_woken=if_woken)
        if row is None:
            self._rejected(f"outcome {type(outcome).__name__}")
        if row.woken:
            logger.info("execution %s was woken while it ran; delivering again", self.execution_id)
            outcome, enqueue = woken, True
        if enqueue:
            self.storage.enqueue(names.DELIVER, (self.execution_id,), self.queue)
        if fields["status"] in TERMINAL:
            self._announce(observing.FINISHED, status=fields["status"], error=fields.get("error"))
            if row.watched and self.engine is not None:
                self.engine.finished(self.execution_id, fields)
        return outcome

    def _written(self, record: StepRecordData) -> None:
        """A step record this delivery wrote: announce it if it records a failed attempt."""
        if observing.failed_attempt(record):
            self._announce(
                observing.STEP_FAILED,
                step_key=record.key,
                status=record.status,
                attempt=record.attempts,
                error=record.error,
            )

    def _announce(self, event: str, **fields) -> None:
        workflow = self.claimed.workflow if self.claimed is not None else None
        fields.update(execution_id=self.execution_id, workflow=workflow)
        observing.announce(self.storage, self.notify, event, **fields)

    def close(self) -> None:
        """The delivery is over, whatever happened: stop renewing the lease."""
        holders.release(self.token)
        if self._lease is not None:
            self.storage.release_lease(self._lease)
            self._lease = None

    def _rejected(self, what: str):
        logger.warning(
            "stale write rejected: %s of execution %s (lease %s is no longer held)", what, self.execution_id, self.token
        )
        self._lost = True
        raise LeaseLost(self.execution_id)
