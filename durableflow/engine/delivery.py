"""One delivery's side of a replay: what step kinds work with, behind ``ctx``.

``ctx`` (``durableflow.engine.context.Context``) is the workflow author's API. Everything a step
kind needs besides it lives here, declared once: the journal and the records loaded at claim
time, the step keys reached, the latch of control-flow interrupts, key derivation, the fenced
writes and the suspension. The driver builds it and hands it to ``ctx``; step kinds get it as
``self._delivery`` (``ctx.step``'s methods) or from ``delivery_of(ctx)``
(``durableflow.engine.context``: documents, sagas, patches).

The replay prologue every kind of step starts with is ``replayed``: reach the key; a
completed record returns its value, a failed one raises its error; otherwise the caller goes on
(live, or resuming an unfinished record).
"""

from __future__ import annotations

import sys
from collections import Counter
from datetime import datetime
from typing import TYPE_CHECKING, Any, Callable, cast

from durableflow import exceptions, values
from durableflow.engine.journal import Journal
from durableflow.engine.records import (
    CancelRequested,
    Claim,
    LeaseLost,
    ReplayEnd,
    StepConflict,
    StepRecordData,
    Suspend,
)
from durableflow.engine.sagas import Saga
from durableflow.engine.settings import EngineSettings
from durableflow.engine.states import STEP_FINISHED, StepStatus

if TYPE_CHECKING:
    from durableflow.engine.verbs import Engine

__all__ = ["Delivery", "Replayed", "MAX_KEY_LENGTH"]

MAX_KEY_LENGTH = 255  # StepRecord.key


class Replayed:
    """What ``Delivery.replayed`` found: ``done`` with its ``value``, or the ``record`` to go on from."""

    __slots__ = ("done", "value", "record")

    def __init__(self, done: bool, value: Any, record: StepRecordData | None):
        self.done, self.value, self.record = done, value, record


class Delivery:
    """The engine's side of one replay of one execution (see the module docstring)."""

    def __init__(
        self,
        claim: Claim,
        journal: Journal,
        settings: EngineSettings,
        engine: Engine | None = None,
        *,
        replay_only: bool = False,
    ):
        self.execution_id = claim.execution_id
        self.journal = journal
        self.settings = settings
        # The verbs steps call (an effect's begin, settle, watch): None only in a replay check,
        # which ends before any step goes live (``go_live``).
        self.engine = cast("Engine", engine)
        self.records = claim.records
        self.seen: set[str] = set()  # the step keys reached in this delivery
        self.sites: Counter[tuple[str, int]] = Counter()
        self.patches: dict[str, bool] = {}  # patched()'s answers in this delivery, by marker key
        self.metadata_calls = 0
        self.streams: dict[str, Any] = {}  # stream id -> its position in this delivery (``engine.streams``)
        self.saga = Saga()
        # cancel() asked this run to end: it stops at the first step without a finished record.
        self.cancel = claim.cancel_requested
        self.in_step: str | None = None  # the step whose body is running
        # Control flow the workflow code must not swallow: the first interrupt raised is
        # latched here and wins over whatever the code does with the exception.
        self.latched: BaseException | None = None
        # A replay check (``durableflow.engine.replays``): stop at the first step without a finished
        # record, before anything runs live.
        self.replay_only = replay_only

    @property
    def interrupt(self) -> BaseException | None:
        """What ends this delivery whatever workflow code does: a storage fault (the journal's
        storage latches it), else the first interrupt a step raised (``latch``)."""
        return self.journal.fault or self.latched

    def latch(self, interrupt: BaseException) -> BaseException:
        if self.latched is None:
            self.latched = interrupt
        return interrupt

    def refuse_inside_step(self, what: str) -> None:
        """``what`` (a step, ``continue_as_new``...) cannot be called inside a step's body."""
        if self.in_step is not None:
            raise exceptions.WorkflowValueError(
                "NESTED_STEP", f"{what} was called inside the body of step {self.in_step!r}"
            )

    def key(self, args: tuple, depth: int = 2) -> tuple[str, tuple]:
        """Split an explicit key off ``args``, or derive one from the caller's line."""
        if args and isinstance(args[0], str):
            key = args[0]
            if not key:
                raise exceptions.WorkflowValueError("INVALID_STEP_KEY", "a step key must not be empty")
            if key.startswith("$"):
                raise exceptions.WorkflowValueError(
                    "INVALID_STEP_KEY", f"step key {key!r}: keys starting with '$' are reserved"
                )
            if len(key) > MAX_KEY_LENGTH:
                raise exceptions.WorkflowValueError(
                    "INVALID_STEP_KEY", f"step key {key[:40]!r}...: at most {MAX_KEY_LENGTH} characters"
                )
            fault = values.text_fault(key)
            if fault is not None:
                raise exceptions.WorkflowValueError("INVALID_STEP_KEY", f"step key {key[:40]!r}: {fault}")
            return key, args[1:]
        frame = sys._getframe(depth)
        site = (frame.f_globals.get("__name__", "?"), frame.f_lineno)
        self.sites[site] += 1
        return f"{site[0]}:{site[1]}#{self.sites[site]}", args

    def guard(self, key: str) -> None:
        """Before a step: stop at a latched interrupt, refuse a step inside another's body."""
        if self.interrupt is not None:
            raise self.interrupt
        self.refuse_inside_step(f"step {key!r}")

    def reach(self, key: str, kind: str) -> StepRecordData | None:
        """Mark ``key`` as reached in this delivery and return its record, if any."""
        self.guard(key)
        if key in self.seen:
            raise exceptions.WorkflowValueError(
                "DUPLICATE_STEP_KEY",
                f"step key {key!r} was reached twice in execution {self.execution_id}; "
                "give each step a unique key (loops: include the index)",
            )
        self.seen.add(key)
        record = self.records.get(key)
        if record is not None and record.kind != kind:
            raise self.latch(
                exceptions.NonDeterminismError(
                    "NON_DETERMINISM",
                    f"Execution {self.execution_id} recorded step {key!r} as a {record.kind!r} step "
                    f"where a {kind!r} step was expected. Check that the workflow is deterministic "
                    "and was not changed under a running execution.",
                    step=key,
                )
            )
        if self.cancel is not None and (record is None or record.status not in STEP_FINISHED):
            # The step boundary a cancelled run stops at: replayed steps before it have
            # registered their compensations again.
            raise self.latch(CancelRequested(self.cancel.get("message", "cancelled")))
        if self.replay_only and (record is None or record.status not in STEP_FINISHED):
            raise self.latch(ReplayEnd(key, record is not None))
        return record

    def replayed(self, key: str, kind: str) -> Replayed:
        """The replay prologue: reach ``key``; a completed record is done with its value, a failed
        one raises its recorded error; else not done, with the record (None or unfinished)."""
        record = self.reach(key, kind)
        if record is not None:
            if record.status == StepStatus.COMPLETED:
                return Replayed(True, record.value, record)
            if record.status == StepStatus.FAILED:
                self.raise_recorded(record)
        return Replayed(False, None, record)

    def go_live(self) -> None:
        """Before running anything live: stop if the lease is already known to be lost."""
        if self.journal.lease_lost():
            raise self.latch(LeaseLost(self.execution_id))

    def mark_compensable(self) -> None:
        """Before a compensable step runs live: mark the execution, once (see ``Journal.mark_compensable``)."""
        if self.saga.marked:
            return
        # A compensable step recorded already means the mark was written (read only when needed:
        # a replay of a long journal without compensations should not scan it).
        if not any(record.meta.get("compensate") for record in self.records.values()):
            try:
                self.journal.mark_compensable()
            except LeaseLost as interrupt:
                self.latch(interrupt)
                raise
        self.saga.marked = True

    def write(self, record: StepRecordData, *, new: bool) -> StepRecordData:
        try:
            self.journal.write_step(record, new=new)
        except (LeaseLost, StepConflict) as interrupt:
            self.latch(interrupt)
            raise
        self.records[record.key] = record
        return record

    def write_many(self, records: list[StepRecordData]) -> None:
        try:
            self.journal.write_steps(records)
        except (LeaseLost, StepConflict) as interrupt:
            self.latch(interrupt)
            raise
        for record in records:
            self.records[record.key] = record

    def write_exclusive(self, record: StepRecordData, previous: StepRecordData | None) -> StepRecordData:
        """``write`` for records that must be this delivery's own (``Journal.write_exclusive``)."""
        try:
            self.journal.write_exclusive(record, previous)
        except (LeaseLost, StepConflict) as interrupt:
            self.latch(interrupt)
            raise
        self.records[record.key] = record
        return record

    def record_live(self, key: str, kind: str, value: Any, *, attempts: int, **fields: Any) -> StepRecordData:
        now = self.journal.now()
        fields.setdefault("started_at", now)
        record = StepRecordData(
            key=key, kind=kind, status=StepStatus.COMPLETED, attempts=attempts, value=value, finished_at=now, **fields
        )
        return self.write(record, new=key not in self.records)

    def suspend(
        self, wake_at: datetime | None, waiting_for: dict[str, Any], guard: Callable[[], bool] | None = None
    ) -> Suspend:
        return self.latch(Suspend(wake_at, waiting_for, guard))  # type: ignore[return-value]

    def raise_recorded(self, record: StepRecordData, cause: BaseException | None = None):
        error = values.decode_error(record.error or {})
        try:
            error.__durableflow_step__ = record.key  # type: ignore[attr-defined]
        except AttributeError:
            pass
        raise error from cause
