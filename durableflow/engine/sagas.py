"""Sagas: compensations registered by steps, and the unwinding that runs them.

``ctx.step.run(key, fn, compensate=undo)`` registers ``undo(result)`` when the step completes
(live or on replay: the functions live in workflow code, so every delivery registers them
again by replaying). A run unwinds on ``cancel()``, on an uncaught workflow error, or on
``ctx.compensate()``: its delivery runs the registered compensations last-completed-first,
each journaled as its own step record under the reserved key ``$compensate:<step key>``:

1. the record is inserted ``running`` (fenced by the lease) before the function is called;
2. the function runs; what it raises is caught (a failing compensation does not stop the rest);
3. the record is updated ``completed`` or ``failed`` (with the error and the duration).

A compensation runs **at most once**. A replay that finds a finished record reports it without
running it again; one that finds a ``running`` record (the worker died while it ran, or the
lease was lost) cannot know whether it took effect, and does not guess: the record is closed
as failed with ``COMPENSATION_INTERRUPTED`` and the next one runs. (A compensation cut short
is reported for an operator to check rather than run twice: a refund must not be paid twice.)
A compensable step recorded in the journal that the replay did not reach (the code changed)
has no function to call: it is reported failed with ``COMPENSATION_UNREACHED``.

The run then ends ``cancelled`` (on cancel, whatever the compensations did), ``compensated``
(every compensation completed) or ``compensation_failed``, with the report on the execution
(``Execution.compensations``): one entry per compensation, in the order they ran.

Cancellation (``Engine.cancel``) of a run with a compensable step records the request on the
execution (``cancel_requested``), clears the lease (a delivery running it is fenced out: the
step it finishes afterwards has its result refused) and makes it runnable at once. The next
delivery replays with the request in its claim: every completed step replays (registering
its compensation again), and the first step without a finished record raises
``CancelRequested``, latched on the context like ``Suspend``: ``except BaseException`` in
workflow code cannot swallow it, every later step raises it again, and it wins over whatever
the code returns. The delivery then unwinds and records ``cancelled``.
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any, Callable

from durableflow import exceptions, values
from durableflow.engine import logs
from durableflow.engine.records import (
    CancelRequested,
    CompensateRequested,
    ContinueAsNew,
    StepRecordData,
    Suspend,
    Unwound,
)
from durableflow.engine.states import STEP_FINISHED, ExecutionStatus, StepStatus

if TYPE_CHECKING:
    from durableflow.engine.context import Context

__all__ = ["Saga", "KIND", "PREFIX", "compensation_key", "unwind", "report_entry"]

logger = logs.logger("durableflow.saga")

S = ExecutionStatus
KIND = "compensation"
PREFIX = "$compensate:"
_FINISHED = STEP_FINISHED
# What workflow methods raise to end a delivery: inside a compensation, a mistake to record.
_CONTROL = (CancelRequested, CompensateRequested, Suspend, ContinueAsNew)
_NEVER = datetime.min.replace(tzinfo=timezone.utc)  # orders a record without times last


def compensation_key(step: str) -> str:
    """The journal key of the compensation of ``step``."""
    return f"{PREFIX}{step}"


class Saga:
    """The compensations one delivery registered, in the order their steps completed."""

    def __init__(self) -> None:
        self.registered: list[tuple[str, Callable[[Any], Any], Any]] = []
        self.marked = False  # this delivery marked the execution compensable (or found it marked)

    def register(self, key: str, fn: Callable[[Any], Any], value: Any) -> None:
        self.registered.append((key, fn, value))

    def pending(self, records: dict[str, StepRecordData]) -> bool:
        """Whether unwinding has anything to do: a compensation registered, due or recorded."""
        return bool(self.registered) or any(
            key.startswith(PREFIX) or (record.meta.get("compensate") and record.status == StepStatus.COMPLETED)
            for key, record in records.items()
        )


def unwind(ctx: Context, *, status: str | None, error: dict[str, Any] | None) -> Unwound:
    """Run the registered compensations, last-completed-first, each journaled; the outcome.

    ``status``: the run's final status whatever the compensations do (``cancelled``), or None
    for ``compensated`` / ``compensation_failed`` as they go. Raises ``LeaseLost`` (stop: the
    delivery that takes over goes on from the journal) or ``StepConflict``.
    """
    from durableflow.engine.context import delivery_of

    delivery = delivery_of(ctx)
    records = delivery.records
    report = [_run_one(ctx, key, fn, value) for key, fn, value in reversed(delivery.saga.registered)]
    reached = {key for key, _, _ in delivery.saga.registered}
    unreached = sorted(
        (r for r in records.values() if r.meta.get("compensate") and r.key not in reached and r.status == StepStatus.COMPLETED),
        key=lambda r: r.finished_at or r.started_at or _NEVER,
        reverse=True,
    )
    for record in unreached:
        report.append(_unreached(ctx, record.key))
    failed = [entry for entry in report if entry["status"] != StepStatus.COMPLETED]
    if status is None:
        status = S.COMPENSATION_FAILED if failed else S.COMPENSATED
        if error is None and failed:
            error = {
                "code": "COMPENSATION_FAILED",
                "message": f"{len(failed)} of {len(report)} compensations failed: "
                + ", ".join(entry["step"] for entry in failed),
            }
    logger.info(
        "execution %s unwound: %d compensations, %d failed; %s", ctx.execution_id, len(report), len(failed), status
    )
    return Unwound(status=status, error=error, report=report)


def _run_one(ctx: Context, step: str, fn: Callable[[Any], Any], value: Any) -> dict[str, Any]:
    from durableflow.engine.context import delivery_of

    delivery = delivery_of(ctx)
    key = compensation_key(step)
    record = delivery.records.get(key)
    if record is not None and record.status in _FINISHED:
        return report_entry(record)
    journal = delivery.journal
    if record is not None:
        # Started by a delivery that ended before recording how it went: it may have taken
        # effect. Not run again; reported for an operator to check.
        closed = _closed(
            record,
            {
                "code": "COMPENSATION_INTERRUPTED",
                "message": f"the compensation of step {step!r} was interrupted (a crash or a lost lease) and is "
                "not run twice: check whether it took effect",
            },
            journal.now(),
        )
        delivery.write(closed, new=False)
        return report_entry(closed)
    started = journal.now()
    running = StepRecordData(
        key=key, kind=KIND, status=StepStatus.RUNNING, attempts=1, meta={"step": step}, started_at=started
    )
    delivery.write(running, new=True)
    delivery.in_step = key  # a step called from a compensation is refused (NESTED_STEP)
    try:
        fn(value)
        failure = None
    except _CONTROL as flow:  # a step or ctx.compensate() called from a compensation
        failure = values.encode_error(
            exceptions.WorkflowValueError(
                "NESTED_STEP", f"the compensation of step {step!r} called a workflow method ({type(flow).__name__}): "
                "a compensation is a plain function of the step's result"
            ),
            step=step,
        )  # fmt: skip
    except Exception as exc:  # noqa: BLE001 - recorded; the other compensations still run
        logger.warning(
            "execution %s: the compensation of step %r failed: %s", ctx.execution_id, step, exc,
            extra={"step_key": step},
        )  # fmt: skip
        failure = values.encode_error(exc, step=step)
    finally:
        delivery.in_step = None
    finished = StepRecordData(
        key=key,
        kind=KIND,
        status=StepStatus.COMPLETED if failure is None else StepStatus.FAILED,
        attempts=1,
        error=failure,
        meta={"step": step},
        started_at=started,
        finished_at=journal.now(),
    )
    delivery.write(finished, new=False)
    return report_entry(finished)


def _unreached(ctx: Context, step: str) -> dict[str, Any]:
    from durableflow.engine.context import delivery_of

    delivery = delivery_of(ctx)
    key = compensation_key(step)
    record = delivery.records.get(key)
    if record is not None and record.status in _FINISHED:
        return report_entry(record)
    now = delivery.journal.now()
    error = {
        "code": "COMPENSATION_UNREACHED",
        "message": f"step {step!r} is recorded as compensable, but the replay did not reach it, so its "
        "compensation is unknown: was the workflow changed under a running execution?",
    }
    closed = StepRecordData(
        key=key, kind=KIND, status=StepStatus.FAILED, attempts=0, error=error, meta={"step": step},
        started_at=now, finished_at=now,
    )  # fmt: skip
    delivery.write(closed, new=record is None)
    return report_entry(closed)


def _closed(record: StepRecordData, error: dict[str, Any], now) -> StepRecordData:
    return StepRecordData(
        key=record.key,
        kind=record.kind,
        status=StepStatus.FAILED,
        attempts=record.attempts,
        error=error,
        meta=record.meta,
        started_at=record.started_at,
        finished_at=now,
    )


def report_entry(record: StepRecordData) -> dict[str, Any]:
    """One compensation, as the execution's report lists it."""
    error = record.error
    if error:
        error = {name: error[name] for name in ("type", "code", "message") if name in error}
    duration = None
    if record.started_at is not None and record.finished_at is not None:
        duration = round((record.finished_at - record.started_at).total_seconds(), 6)
    return {
        "step": record.meta.get("step", record.key[len(PREFIX) :]),
        "status": record.status,
        "error": error or None,
        "duration": duration,
        "started_at": _iso(record.started_at),
        "finished_at": _iso(record.finished_at),
    }


def _iso(moment) -> str | None:
    return None if moment is None else moment.isoformat()
