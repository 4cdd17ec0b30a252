"""The records a delivery exchanges with its storage: journal entries, claims and outcomes."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Callable, Union

from durableflow.engine.states import TERMINAL, ExecutionStatus

__all__ = [
    "ENDED",
    "StepRecordData",
    "Claim",
    "Completed",
    "Failed",
    "Suspended",
    "Stalled",
    "Requeued",
    "Continued",
    "Unwound",
    "Outcome",
    "LeaseLost",
    "StepConflict",
    "Suspend",
    "ContinueAsNew",
    "ReplayEnd",
    "CancelRequested",
    "CompensateRequested",
    "outcome_fields",
    "RELEASED",
    "retry_target",
    "same_outcome",
]

S = ExecutionStatus


@dataclass(slots=True)
class StepRecordData:
    """One journal entry: the outcome (or the progress) of one step key."""

    key: str
    kind: str
    status: str
    attempts: int = 0
    value: Any = None
    error: dict[str, Any] | None = None
    meta: dict[str, Any] = field(default_factory=dict)
    started_at: datetime | None = None
    finished_at: datetime | None = None


RECORD_FIELDS = ("key", "kind", "status", "attempts", "value", "error", "meta", "started_at", "finished_at")


@dataclass
class Claim:
    """What a delivery knows after claiming the lease: read once, then kept in memory."""

    execution_id: str
    workflow: str
    version: str
    params: Any
    records: dict[str, StepRecordData]
    now: datetime
    delivery: int = 1
    parent_id: str | None = None
    root_id: str | None = None
    waiting_for: dict[str, Any] | None = None
    queue: str = ""
    # cancel() asked this run to compensate and end: the error it ends with (see sagas).
    cancel_requested: dict[str, Any] | None = None
    seed: str | None = None  # what seeds ctx.random(), if not the execution id (a fork's)
    # Deliveries in a row before this one that died holding the lease (``lost_deliveries``).
    lost: int = 0
    # The start's span context, as the propagator wrote it (``durableflow.engine.tracing``).
    trace_context: dict[str, str] | None = None


@dataclass
class Completed:
    result: Any


@dataclass
class Failed:
    error: dict[str, Any]


@dataclass
class Suspended:
    """The execution waits: for ``wake_at`` (a timer, a retry) or for something to wake it.

    ``guard``, if given, runs in the transaction that parks the execution: it registers what
    will wake it and answers False if that already happened (the delivery then replays at
    once instead of parking), so a wake-up racing the park is never lost.
    """

    wake_at: datetime | None
    waiting_for: dict[str, Any]
    guard: Callable[[], bool] | None = field(default=None, compare=False, repr=False)


@dataclass
class Stalled:
    """The delivery cannot go on with this code (non-determinism); try again after ``wake_at``.

    The status stays ``waiting`` and the journal untouched, so a fixed deploy (or
    ``durableflow.retry``) resumes the run with nothing lost.
    """

    error: dict[str, Any]
    wake_at: datetime
    waiting_for: dict[str, Any]


@dataclass
class Requeued:
    """End the delivery without an outcome and deliver again at once (a clean replay)."""

    reason: str


@dataclass
class Continued:
    """``ctx.continue_as_new``: the execution completes and a fresh one carries on with ``params``."""

    params: Any
    execution_id: str  # the new execution's id (the same on every replay of this delivery)


@dataclass
class Unwound:
    """The compensations ran (``durableflow.engine.sagas``): the run ends with ``status``
    (cancelled, compensated or compensation_failed), ``error`` and the compensation ``report``."""

    status: str
    error: dict[str, Any] | None
    report: list[dict[str, Any]]


Outcome = Union[Completed, Failed, Suspended, Stalled, Requeued, Continued, Unwound]
ENDED = (Completed, Failed, Continued, Unwound)  # the outcomes that end the execution


class LeaseLost(BaseException):
    """Another delivery holds the execution now: stop without writing anything.

    A ``BaseException`` so that workflow code's ``except Exception`` cannot swallow it.
    """


class StepConflict(BaseException):
    """The step is already recorded with another outcome: end the delivery and replay."""


class Suspend(BaseException):
    """End the delivery: the execution waits for ``wake_at`` or to be woken (see ``Suspended``)."""

    def __init__(self, wake_at: datetime | None, waiting_for: dict[str, Any], guard: Callable[[], bool] | None = None):
        super().__init__(waiting_for.get("kind"))
        self.wake_at = wake_at
        self.waiting_for = waiting_for
        self.guard = guard


class ReplayEnd(BaseException):
    """A replay check reached the first step its journal has not finished: nothing runs live."""

    def __init__(self, key: str, recorded: bool):
        super().__init__(key)
        self.key, self.recorded = key, recorded


class ContinueAsNew(BaseException):
    """End the delivery: the execution completes and a new one starts with ``params``."""

    def __init__(self, params: Any):
        super().__init__("continue-as-new")
        self.params = params


class CancelRequested(BaseException):
    """The run is cancelled: stop at this step boundary, then compensate (see ``sagas``).

    A ``BaseException`` latched on the context: ``except BaseException`` in workflow code
    cannot swallow it, every later step raises it again and it wins over what the code returns.
    """


class CompensateRequested(BaseException):
    """``ctx.compensate()``: end the run by running its compensations now."""


# A lease given back: the execution stays running, claimable at once by the next delivery.
RELEASED: dict[str, Any] = {"lease_token": None, "lease_expires_at": None}


def outcome_fields(outcome: Outcome, now: datetime) -> tuple[dict[str, Any], bool]:
    """The execution fields an outcome sets, and whether to send a wake-up at once.

    Shared by every storage so that they agree on what each outcome means. The lease is
    always released.
    """
    fields: dict[str, Any] = {"lease_token": None, "lease_expires_at": None}
    enqueue = False
    if isinstance(outcome, Completed):
        fields.update(status=S.COMPLETED, result=outcome.result, error=None, finished_at=now)
    elif isinstance(outcome, Continued):
        fields.update(status=S.COMPLETED, result=None, error=None, finished_at=now, continued_as=outcome.execution_id)
    elif isinstance(outcome, Failed):
        fields.update(status=S.FAILED, error=outcome.error, finished_at=now)
    elif isinstance(outcome, Unwound):
        fields.update(status=outcome.status, error=outcome.error, compensations=outcome.report, finished_at=now)
    elif isinstance(outcome, (Suspended, Stalled)):
        due_now = outcome.wake_at is not None and outcome.wake_at <= now
        fields.update(
            status=S.PENDING if due_now else S.WAITING,
            wake_at=None if due_now else outcome.wake_at,
            waiting_for=outcome.waiting_for,
        )
        if isinstance(outcome, Stalled):
            fields["error"] = outcome.error
        enqueue = due_now
    elif isinstance(outcome, Requeued):
        fields.update(status=S.PENDING)
        enqueue = True
    else:  # pragma: no cover - Outcome is a closed union
        raise TypeError(f"unknown outcome {outcome!r}")
    if fields["status"] in TERMINAL or fields["status"] == S.PENDING:
        fields.update(wake_at=None, waiting_for=None)
    if enqueue:
        fields["enqueued_at"] = now
    return fields, enqueue


def retry_target(error: dict[str, Any] | None) -> str | None:
    """The step key a retry of a failed run resumes from (the step whose error failed it)."""
    return (error or {}).get("step")


def same_outcome(a: StepRecordData, b: StepRecordData) -> bool:
    """Whether two records of one key say the same thing (tracebacks aside)."""

    def error_id(record: StepRecordData):
        error = record.error or {}
        return error.get("type"), error.get("code"), error.get("message")

    return (a.kind, a.status, a.value, error_id(a)) == (b.kind, b.status, b.value, error_id(b))
