"""The workflow context: ``ctx``, replayed against a journal.

A delivery runs the workflow function from the top. Each step method (``ctx.step``, in
``durableflow.engine.steps``) looks its key up in the journal loaded at claim time: a
completed step returns its recorded value without running; the first step without a record
runs live and is written (one fenced write). Suspending (a sleep, a durable retry, a wait)
raises ``Suspend``, which ends the delivery. A cancelled run (``cancel_requested`` in its claim)
stops at the first step without a finished record with ``CancelRequested``, latched the same
way, and its delivery unwinds (``durableflow.engine.sagas``).
"""

from __future__ import annotations

import logging
import random
import sys
import uuid
from collections import Counter
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any, Callable

from durableflow import exceptions, values
from durableflow.engine import logs
from durableflow.engine.journal import Journal
from durableflow.engine.records import (
    CancelRequested,
    Claim,
    CompensateRequested,
    ContinueAsNew,
    LeaseLost,
    ReplayEnd,
    StepConflict,
    StepRecordData,
    Suspend,
)
from durableflow.engine.sagas import Saga
from durableflow.engine.settings import EngineSettings
from durableflow.engine.states import StepStatus

if TYPE_CHECKING:
    from durableflow.engine.verbs import Engine

__all__ = ["Context", "Suspend", "MAX_KEY_LENGTH", "iso", "parse_iso"]

MAX_KEY_LENGTH = 255  # StepRecord.key
_FINISHED = frozenset({StepStatus.COMPLETED, StepStatus.FAILED})


def iso(moment: datetime) -> str:
    return moment.astimezone(timezone.utc).isoformat()


def parse_iso(text: str) -> datetime:
    return datetime.fromisoformat(text)


class Context:
    """What a workflow function receives as ``ctx``."""

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
        self.workflow = claim.workflow
        self.params = claim.params
        self.parent_id = claim.parent_id
        self.root_id = claim.root_id or claim.execution_id
        self.delivery = claim.delivery
        self.logger = logging.LoggerAdapter(
            logs.logger("durableflow.workflow"), {"execution_id": claim.execution_id}
        )
        from durableflow.engine.metadata import Metadata
        from durableflow.engine.steps import StepAPI

        self.step = StepAPI(self)
        self.metadata = Metadata(self)
        self._journal = journal
        self._settings = settings
        self._engine = engine  # the verbs steps call (an effect's begin, settle, watch)
        self._records = claim.records
        self._seen: set[str] = set()
        self._sites: Counter[tuple[str, int]] = Counter()
        self._rng = random.Random(claim.seed or claim.execution_id)
        self._now_calls = 0
        self._patches: dict[str, bool] = {}  # patched()'s answers in this delivery, by marker key
        self._metadata_calls = 0
        self._streams: dict[str, Any] = {}  # stream id -> its position in this delivery (``streams``)
        self._saga = Saga()
        # cancel() asked this run to end: it stops at the first step without a finished record.
        self._cancel = claim.cancel_requested
        self._in_step: str | None = None
        # Control flow the workflow code must not swallow: the first interrupt raised is
        # latched here and wins over whatever the code does with the exception.
        self._interrupt: BaseException | None = None
        # A replay check (``durableflow.engine.replays``): stop at the first step without a finished
        # record, before anything runs live.
        self._replay_only = replay_only

    @property
    def interrupt(self) -> BaseException | None:
        """What ends this delivery whatever workflow code does: a storage fault (the journal's
        storage latches it), else the first interrupt a step raised (``_latch``)."""
        return self._journal.fault or self._interrupt

    # Deterministic helpers ------------------------------------------------------------

    def now(self) -> datetime:
        """The current time, journaled: a replay returns the time the first run saw."""
        self._now_calls += 1
        key = f"$now:{self._now_calls}"
        record = self._reach(key, "now")
        if record is None:
            record = self._record_live(key, "now", iso(self._journal.now()), attempts=1)
        return parse_iso(record.value)

    def random(self) -> float:
        """A float in [0, 1), from a generator seeded by the execution id."""
        return self._rng.random()

    def uuid(self) -> uuid.UUID:
        """A UUID4 from the same seeded generator: the same on every replay."""
        return uuid.UUID(int=self._rng.getrandbits(128), version=4)

    def patched(self, patch_id: str) -> bool:
        """Whether this run takes the new code of ``patch_id``: ``if ctx.patched("id"): new else: old``.

        True (and its marker is journaled) for a run that reaches this point under this code; False
        on the replay of a run that went past it under the old code. Asked again, the same answer.
        """
        from durableflow.engine.steps import patches

        return patches.patched(self, patch_id)

    def deprecate_patch(self, patch_id: str) -> None:
        """The old branch of ``patch_id`` is removed: runs that hold its marker replay on; a run
        that took the old branch stalls here (``NON_DETERMINISM``) instead of running the wrong code."""
        from durableflow.engine.steps import patches

        patches.deprecate_patch(self, patch_id)

    def stream(self, stream_id: str):
        """The run's stream ``stream_id``: ``ctx.stream("log").write("line")`` appends a chunk
        that readers see at once (``durableflow.streams.read``, the REST API, the admin)."""
        from durableflow.engine.streams import Stream

        return Stream(self, stream_id)

    def continue_as_new(self, params: Any = None) -> None:
        """Complete this execution and start a fresh one of the same workflow with ``params``.

        The new execution has the same root (and parent) and an empty journal, so that a loop
        that never ends keeps a short one. Nothing after this call runs. ``result()`` of this
        execution (and a parent's wait for it) answers with the outcome of the last one.
        """
        if self.interrupt is not None:
            raise self.interrupt
        if self._in_step is not None:
            raise exceptions.WorkflowValueError(
                "NESTED_STEP", f"continue_as_new was called inside the body of step {self._in_step!r}"
            )
        _, decoded = values.roundtrip(params, max_bytes=self._settings.max_payload_bytes)
        self._go_live()
        raise self._latch(ContinueAsNew(decoded))

    def compensate(self) -> None:
        """End the run now by running its compensations, last-completed-first.

        The run ends ``compensated`` (or ``compensation_failed``); nothing after this call runs.
        """
        if self.interrupt is not None:
            raise self.interrupt
        if self._in_step is not None:
            raise exceptions.WorkflowValueError(
                "NESTED_STEP", f"compensate was called inside the body of step {self._in_step!r}"
            )
        raise self._latch(CompensateRequested("compensate"))

    # Engine internals (used by StepAPI) ----------------------------------------------

    def _latch(self, interrupt: BaseException) -> BaseException:
        if self._interrupt is None:
            self._interrupt = interrupt
        return interrupt

    def _key(self, args: tuple, depth: int = 2) -> tuple[str, tuple]:
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
        self._sites[site] += 1
        return f"{site[0]}:{site[1]}#{self._sites[site]}", args

    def _guard(self, key: str) -> None:
        """Before a step: stop at a latched interrupt, refuse a step inside another's body."""
        if self.interrupt is not None:
            raise self.interrupt
        if self._in_step is not None:
            raise exceptions.WorkflowValueError(
                "NESTED_STEP", f"step {key!r} was called inside the body of step {self._in_step!r}"
            )

    def _reach(self, key: str, kind: str) -> StepRecordData | None:
        """Mark ``key`` as reached in this delivery and return its record, if any."""
        self._guard(key)
        if key in self._seen:
            raise exceptions.WorkflowValueError(
                "DUPLICATE_STEP_KEY",
                f"step key {key!r} was reached twice in execution {self.execution_id}; "
                "give each step a unique key (loops: include the index)",
            )
        self._seen.add(key)
        record = self._records.get(key)
        if record is not None and record.kind != kind:
            raise self._latch(
                exceptions.NonDeterminismError(
                    "NON_DETERMINISM",
                    f"Execution {self.execution_id} recorded step {key!r} as a {record.kind!r} step "
                    f"where a {kind!r} step was expected. Check that the workflow is deterministic "
                    "and was not changed under a running execution.",
                    step=key,
                )
            )
        if self._cancel is not None and (record is None or record.status not in _FINISHED):
            # The step boundary a cancelled run stops at: replayed steps before it have
            # registered their compensations again.
            raise self._latch(CancelRequested(self._cancel.get("message", "cancelled")))
        if self._replay_only and (record is None or record.status not in _FINISHED):
            raise self._latch(ReplayEnd(key, record is not None))
        return record

    def _go_live(self) -> None:
        """Before running anything live: stop if the lease is already known to be lost."""
        if self._journal.lease_lost():
            raise self._latch(LeaseLost(self.execution_id))

    def _mark_compensable(self) -> None:
        """Before a compensable step runs live: mark the execution, once (see ``Journal.mark_compensable``)."""
        if self._saga.marked:
            return
        # A compensable step recorded already means the mark was written (read only when needed:
        # a replay of a long journal without compensations should not scan it).
        if not any(record.meta.get("compensate") for record in self._records.values()):
            try:
                self._journal.mark_compensable()
            except LeaseLost as interrupt:
                self._latch(interrupt)
                raise
        self._saga.marked = True

    def _write(self, record: StepRecordData, *, new: bool) -> StepRecordData:
        try:
            self._journal.write_step(record, new=new)
        except (LeaseLost, StepConflict) as interrupt:
            self._latch(interrupt)
            raise
        self._records[record.key] = record
        return record

    def _write_many(self, records: list[StepRecordData]) -> None:
        try:
            self._journal.write_steps(records)
        except (LeaseLost, StepConflict) as interrupt:
            self._latch(interrupt)
            raise
        for record in records:
            self._records[record.key] = record

    def _write_exclusive(self, record: StepRecordData, previous: StepRecordData | None) -> StepRecordData:
        """``_write`` for records that must be this delivery's own (``Journal.write_exclusive``)."""
        try:
            self._journal.write_exclusive(record, previous)
        except (LeaseLost, StepConflict) as interrupt:
            self._latch(interrupt)
            raise
        self._records[record.key] = record
        return record

    def _record_live(self, key: str, kind: str, value: Any, *, attempts: int, **fields: Any) -> StepRecordData:
        now = self._journal.now()
        fields.setdefault("started_at", now)
        record = StepRecordData(
            key=key, kind=kind, status=StepStatus.COMPLETED, attempts=attempts, value=value, finished_at=now, **fields
        )
        return self._write(record, new=key not in self._records)

    def _suspend(
        self, wake_at: datetime | None, waiting_for: dict[str, Any], guard: Callable[[], bool] | None = None
    ) -> Suspend:
        return self._latch(Suspend(wake_at, waiting_for, guard))  # type: ignore[return-value]

    def _raise_recorded(self, record: StepRecordData, cause: BaseException | None = None):
        error = values.decode_error(record.error or {})
        try:
            error.__durableflow_step__ = record.key  # type: ignore[attr-defined]
        except AttributeError:
            pass
        raise error from cause
