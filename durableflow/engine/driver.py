"""One delivery: claim, replay the workflow, record the outcome."""

from __future__ import annotations

import uuid
from datetime import timedelta
from typing import TYPE_CHECKING

from durableflow import exceptions, values
from durableflow.engine import logs, sagas, tracing
from durableflow.engine.context import Context
from durableflow.engine.delivery import Delivery
from durableflow.engine.faults import FAULT, StorageFault
from durableflow.engine.journal import Journal
from durableflow.engine.records import (
    CancelRequested,
    Claim,
    CompensateRequested,
    Completed,
    ContinueAsNew,
    Continued,
    Failed,
    LeaseLost,
    Outcome,
    Requeued,
    Stalled,
    StepConflict,
    Suspend,
    Suspended,
)
from durableflow.engine.settings import EngineSettings
from durableflow.engine.states import ExecutionStatus
from durableflow.registry import Registry

if TYPE_CHECKING:
    from durableflow.engine.verbs import Engine

__all__ = ["run", "continuation_id", "missing_code", "SKIPPED", "LEASE_LOST", "FAULT"]

logger = logs.logger("durableflow.delivery")

SKIPPED = "skipped"
LEASE_LOST = "lease-lost"

# A stalled execution (code that does not match its journal) is tried again after
# 2, 4, 8 ... seconds, at most every ten minutes, until a deploy fixes it or it is cancelled.
_STALL_MAX_SECONDS = 600


def run(
    journal: Journal, registry: Registry, settings: EngineSettings | None = None, engine: Engine | None = None
) -> str:
    """Run one delivery of ``journal.execution_id``; return what happened, for logs and tests.

    ``engine``: the verbs the steps call (an effect's begin and settle); the one delivering.

    Safe to call any number of times at once for the same execution: only the delivery
    that claims the lease runs workflow code, and every write it makes is fenced by it.

    A storage fault (``durableflow.engine.faults``) anywhere, the claim and the outcome
    included, ends the delivery with ``FAULT``: nothing more is written, the run's status is
    left as the claim made it, and the caller delivers it again.
    """
    began = tracing.clock()
    try:
        claim = journal.claim()
        if claim is None:  # the caller (``Engine.deliver``) logs it
            return SKIPPED
        with tracing.delivery(claim, began) as span:  # from the claim on: a claim that matched nothing makes none
            outcome = _replay(claim, journal, registry, settings or EngineSettings(), engine)
            outcome = journal.finish(outcome)
            tracing.delivered(span, outcome)
    except LeaseLost:
        logger.warning(
            "lease lost: execution %s is held by another delivery; stale write rejected, stopping",
            journal.execution_id,
        )
        return LEASE_LOST
    except StorageFault as fault:
        logger.warning(
            "execution %s: the database failed under the delivery (%s); it ends without an outcome",
            journal.execution_id,
            fault,
        )
        return FAULT
    finally:
        journal.close()
    return type(outcome).__name__.lower()


# What a cancelled run's replay may end with and still compensate: not a lost lease or a
# conflict (another delivery goes on), nor a signal from outside (a worker shutting down).
_ENDS_CANCELLED = (Exception, CancelRequested, CompensateRequested, Suspend, ContinueAsNew)


def _replay(
    claim: Claim, journal: Journal, registry: Registry, settings: EngineSettings, engine: Engine | None
) -> Outcome:
    if claim.lost > settings.max_lost_deliveries:
        return _lost(claim)
    definition = registry.get(claim.workflow, claim.version)
    if definition is None:
        return _stall(claim, journal, missing_code(claim, registry))
    delivery = Delivery(claim, journal, settings, engine)
    ctx = Context(claim, delivery)
    try:
        result, error = definition.fn(ctx, claim.params), None
    except BaseException as exc:  # noqa: BLE001 - sorted below; the latch decides first
        result, error = None, exc
    if ctx.interrupt is not None:
        error = ctx.interrupt
    if isinstance(error, StorageFault):
        raise error  # the database's failure, not the workflow's: no outcome at all
    if claim.cancel_requested is not None and (error is None or isinstance(error, _ENDS_CANCELLED)):
        # Cancelled: however the replay ended (at the cancel, or done already), it compensates.
        return _unwind(ctx, status=ExecutionStatus.CANCELLED, error=claim.cancel_requested)
    if error is None:
        try:
            return Completed(values.roundtrip(result, code="INVALID_RESULT", max_bytes=settings.max_payload_bytes)[1])
        except exceptions.WorkflowValueError as exc:
            exc.message = f"the workflow returned a value that cannot be journaled: {exc.message}"
            error = exc
    if isinstance(error, CompensateRequested):
        return _unwind(ctx, status=None, error=None)
    if isinstance(error, Suspend):
        return Suspended(error.wake_at, error.waiting_for, guard=error.guard)
    if isinstance(error, ContinueAsNew):
        return Continued(error.params, continuation_id(claim.execution_id))
    if isinstance(error, StepConflict):
        logger.warning("execution %s: %s; replaying", claim.execution_id, error)
        return Requeued("step-conflict")
    if isinstance(error, exceptions.NonDeterminismError):
        return _stall(claim, journal, error)
    if isinstance(error, LeaseLost) or not isinstance(error, Exception):
        raise error
    logger.info("execution %s failed: %s", claim.execution_id, error)
    encoded = values.encode_error(error, step=getattr(error, "__durableflow_step__", None))
    # An uncaught error unwinds a saga; a broken effect protocol stays failed, for retry().
    if delivery.saga.pending(claim.records) and not isinstance(error, exceptions.EffectDeliveryError):
        return _unwind(ctx, status=None, error=encoded)
    return Failed(encoded)


def missing_code(claim: Claim, registry: Registry) -> exceptions.NonDeterminismError:
    """Why a worker cannot run ``claim``'s code: the workflow, or the version it started with, is not here."""
    current = registry.get(claim.workflow)
    if current is None:
        return exceptions.NonDeterminismError(
            "UNKNOWN_WORKFLOW",
            f"Execution {claim.execution_id} runs workflow {claim.workflow!r}, which this worker "
            "does not have. Deploy its code to the workers, or cancel the execution.",
        )
    registered = ", ".join(repr(d.version) for d in registry.versions(claim.workflow))
    if current.kind != "code":
        fix = (
            "That revision of the workflow document cannot be loaded (deleted, or not valid here): cancel the "
            "execution, or rerun it on the newest revision."
        )
    else:
        fix = (
            f"Keep the function of version {claim.version!r} registered beside the new one "
            f"(@durableflow.workflow({claim.workflow!r}, version={claim.version!r}), under another function "
            "name) until its executions finish, or cancel them; it resumes as soon as a worker has that version. "
            "To change a workflow under its running executions without a new version, put the change behind "
            "`if ctx.patched(...)`."
        )
    return exceptions.NonDeterminismError(
        "UNKNOWN_VERSION",
        f"Execution {claim.execution_id} started with version {claim.version!r} of workflow {claim.workflow!r}, "
        f"which is not registered on this worker (registered: {registered}). {fix}",
        version=claim.version,
    )


def _unwind(ctx: Context, *, status: str | None, error: dict | None) -> Outcome:
    try:
        return sagas.unwind(ctx, status=status, error=error)
    except StepConflict as conflict:
        logger.warning("execution %s: %s while compensating; replaying", ctx.execution_id, conflict)
        return Requeued("step-conflict")


def _lost(claim: Claim) -> Failed:
    """A run whose deliveries keep dying with their process: failed before any of its code runs
    again (that code is what kills the process; its compensations are code too, and are left)."""
    error = exceptions.DurableflowError(
        "DELIVERY_LOST",
        f"the last {claim.lost} deliveries of execution {claim.execution_id} died with their worker process "
        "before they finished (killed, out of memory, a crash in native code), more than MAX_LOST_DELIVERIES "
        "allows: it is failed instead of delivered again. The worker logs name the step it was at; fix the "
        "cause, then retry it.",
        lost_deliveries=claim.lost,
    )
    logger.error("execution %s failed: %s", claim.execution_id, error.message)
    return Failed(values.encode_error(error))


def _stall(claim: Claim, journal: Journal, error: exceptions.NonDeterminismError) -> Stalled:
    previous = claim.waiting_for or {}
    stalls = previous.get("stalls", 0) + 1 if previous.get("kind") == "stalled" else 1
    delay = min(2**stalls, _STALL_MAX_SECONDS)
    wake_at = journal.now() + timedelta(seconds=delay)
    logger.error("%s (try %d; next in %d s)", error.message, stalls, delay)
    return Stalled(
        error=values.encode_error(error),
        wake_at=wake_at,
        waiting_for={"kind": "stalled", "reason": error.code, "stalls": stalls, "until": wake_at.isoformat()},
    )


def continuation_id(execution_id: str) -> str:
    """The id of the execution that continues ``execution_id`` (the same on every replay)."""
    return uuid.uuid5(uuid.NAMESPACE_URL, f"durableflow:continue:{execution_id}").hex
