"""The verbs: start, cancel, retry, result, deliver, sweep.

Celery tasks, admin actions, API views and management commands all call these.
"""

from __future__ import annotations

import contextlib
import logging
import time
from typing import Any, Callable

from django.db import IntegrityError, close_old_connections, connection, transaction
from django.db.models.functions import Now

from durableflow import exceptions
from durableflow.conf import df_settings
from durableflow.engine import driver
from durableflow.engine.context import EngineSettings
from durableflow.engine.journal import TERMINAL, ExecutionStatus, StepStatus, retry_target
from durableflow.engine.starts import check_repeat, prepare_start
from durableflow.journal import OrmJournal
from durableflow.models import Execution, StepRecord
from durableflow.registry import WorkflowDefinition, registry

__all__ = ["start", "start_execution", "cancel", "retry", "result", "deliver", "sweep", "publish"]

logger = logging.getLogger("durableflow")

S = ExecutionStatus


def engine_settings() -> EngineSettings:
    return EngineSettings(default_retry=df_settings.DEFAULT_RETRY, max_payload_bytes=df_settings.MAX_PAYLOAD_BYTES)


# Starting -------------------------------------------------------------------------------


def start(
    workflow: str | Callable[..., Any] | WorkflowDefinition,
    params: Any = None,
    *,
    execution_id: str | None = None,
    idempotency_key: str | None = None,
    queue: str | None = None,
) -> Execution:
    """Start an execution inside the caller's transaction; its delivery is sent on commit.

    A rolled-back transaction starts nothing. A repeated ``idempotency_key`` (or
    ``execution_id``) returns the first execution, or raises ``IDEMPOTENCY_CONFLICT`` if the
    params differ. Invalid input raises ``WorkflowStartError`` and writes nothing.
    """
    return start_execution(workflow, params, execution_id=execution_id, idempotency_key=idempotency_key, queue=queue)[0]


def start_execution(workflow, params=None, *, execution_id=None, idempotency_key=None, queue=None):
    """``start``, returning ``(execution, created)`` for callers that answer 201 or 200."""
    request = prepare_start(
        registry,
        workflow,
        params,
        execution_id=execution_id,
        idempotency_key=idempotency_key,
        max_payload_bytes=df_settings.MAX_PAYLOAD_BYTES,
    )
    queue = queue or df_settings.DEFAULT_QUEUE
    # The unique constraints, not a pre-check, decide what is a repeat. Inside the caller's
    # transaction a savepoint keeps a repeat from breaking it; outside, the INSERT is its own.
    guard = transaction.atomic() if connection.in_atomic_block else contextlib.nullcontext()
    try:
        with guard:
            execution = Execution.objects.create(
                id=request.execution_id,
                workflow=request.definition.name,
                version=request.definition.version,
                params=request.params,
                idempotency_key=idempotency_key,
                queue=queue,
                root_id=request.execution_id,
            )
    except IntegrityError:
        existing = _existing(request)
        if existing is None:
            raise
        check_repeat(request, existing.workflow, existing.params)
        return existing, False
    transaction.on_commit(lambda: publish(execution.id, queue))
    return execution, True


def _existing(request) -> Execution | None:
    existing = Execution.objects.filter(pk=request.execution_id).first()
    if existing is None and request.idempotency_key is not None:
        existing = Execution.objects.filter(
            workflow=request.definition.name, idempotency_key=request.idempotency_key
        ).first()
    return existing


# Steering -------------------------------------------------------------------------------


def get(execution_id: str) -> Execution:
    try:
        return Execution.objects.get(pk=execution_id)
    except Execution.DoesNotExist:
        raise exceptions.ExecutionNotFound(message=f"no execution {execution_id!r}") from None


def cancel(execution_id: str, reason: str | None = None) -> Execution:
    """Cancel an unfinished execution.

    Clearing the lease token fences out a delivery that is running it: its next journal
    write matches no row, so it stops at its next step boundary without an outcome.
    """
    message = reason or "cancelled"
    updated = Execution.objects.filter(pk=execution_id, status__in=[S.PENDING, S.RUNNING, S.WAITING]).update(
        status=S.CANCELLED,
        error={"code": "CANCELLED", "message": message},
        lease_token=None,
        lease_expires_at=None,
        wake_at=None,
        finished_at=Now(),
    )
    execution = get(execution_id)
    if not updated:
        raise exceptions.InvalidTransition(
            message=f"execution {execution_id} is {execution.status} and cannot be cancelled"
        )
    logger.info("execution %s cancelled: %s", execution_id, message)
    return execution


def retry(execution_id: str) -> Execution:
    """Resume a failed (or stalled) execution from the step that failed it.

    Completed steps replay; the failed step gets a fresh set of attempts.
    """
    with transaction.atomic():
        execution = get(execution_id)
        stalled = execution.status == S.WAITING and (execution.waiting_for or {}).get("kind") == "stalled"
        if execution.status != S.FAILED and not stalled:
            raise exceptions.InvalidTransition(
                message=f"execution {execution_id} is {execution.status}; only a failed run can be retried"
            )
        step = retry_target(execution.error)
        if step is not None:
            StepRecord.objects.filter(execution_id=execution_id, key=step, status=StepStatus.FAILED).update(
                status=StepStatus.WAITING, attempts=0, finished_at=None
            )
        updated = Execution.objects.filter(pk=execution_id, status=execution.status).update(
            status=S.PENDING, error=None, finished_at=None, wake_at=None, waiting_for=None, enqueued_at=Now()
        )
        if not updated:
            raise exceptions.InvalidTransition(message=f"execution {execution_id} changed while being retried")
        transaction.on_commit(lambda: publish(execution_id, execution.queue))
    logger.info("execution %s retried", execution_id)
    return get(execution_id)


def result(execution_id: str, timeout: float | None = None, *, poll_interval: float = 0.05) -> Any:
    """Block until the execution finishes (polling the database) and return its result.

    Raises ``ExecutionFailed`` if it ended without completing, ``WaitTimeout`` after
    ``timeout`` seconds.
    """
    deadline = None if timeout is None else time.monotonic() + timeout
    interval = poll_interval
    while True:
        row = Execution.objects.filter(pk=execution_id).values("status", "result", "error").first()
        if row is None:
            raise exceptions.ExecutionNotFound(message=f"no execution {execution_id!r}")
        if row["status"] == S.COMPLETED:
            return row["result"]
        if row["status"] in TERMINAL:
            error = row["error"] or {}
            raise exceptions.ExecutionFailed(
                message=f"execution {execution_id} is {row['status']}: {error.get('message', '')}".rstrip(": "),
                status=row["status"],
                error=error,
            )
        if deadline is not None and time.monotonic() >= deadline:
            raise exceptions.WaitTimeout(message=f"execution {execution_id} is still {row['status']} after {timeout} s")
        time.sleep(interval if deadline is None else max(0.0, min(interval, deadline - time.monotonic())))
        interval = min(interval * 1.5, 1.0)


# Deliveries -------------------------------------------------------------------------------


def deliver(execution_id: str) -> str:
    """One delivery of ``execution_id`` (what the Celery task runs)."""
    # Drop a connection that broke (a database restart) or outlived CONN_MAX_AGE, as Django
    # does around a request: workers keep theirs between tasks. Not inside a transaction
    # (a caller's, or a test's), which that would end.
    if not connection.in_atomic_block:
        close_old_connections()
    journal = OrmJournal(execution_id, lease_seconds=df_settings.LEASE_SECONDS, on_enqueue=publish)
    return driver.deliver(journal, registry, engine_settings())


def publish(execution_id: str, queue: str | None = None) -> bool:
    """Send a wake-up message for ``execution_id``; never raise, never hang for long.

    A message that cannot be sent is not lost work: the execution row is committed, and the
    sweep sends it again once it is overdue.
    """
    from durableflow import tasks

    try:
        tasks.deliver.apply_async(
            (execution_id,),
            queue=queue or df_settings.DEFAULT_QUEUE,
            retry=True,
            retry_policy={"max_retries": 1, "interval_start": 0, "interval_step": 0.2, "interval_max": 0.2},
        )
    except Exception:  # noqa: BLE001 - any broker failure; the sweep is the fallback
        logger.warning(
            "could not publish a delivery of execution %s; the sweep will resend it", execution_id, exc_info=True
        )
        return False
    return True


def sweep() -> dict[str, int]:
    """Wake due executions and re-send wake-ups nobody acted on; return counts.

    Safe to run from several beats at once: waking is a compare-and-set from ``waiting`` to
    ``pending`` (rows locked with SKIP LOCKED where the database has it), and a duplicate
    wake-up is harmless because only one delivery can claim an execution's lease. One
    execution that cannot be published is logged and skipped.
    """
    batch = int(df_settings.SWEEP_BATCH_SIZE)
    with transaction.atomic():
        due = list(
            Execution.objects.due()
            .order_by("wake_at")
            .select_for_update(skip_locked=True)
            .values_list("id", "queue", "waiting_for")[:batch]
        )
        if due:
            Execution.objects.filter(pk__in=[pk for pk, _, _ in due], status=S.WAITING).update(
                status=S.PENDING, wake_at=None, enqueued_at=Now()
            )
            _complete_timers(due)
    with transaction.atomic():
        stale = list(
            Execution.objects.stale(df_settings.LEASE_SECONDS)
            .order_by("enqueued_at")
            .select_for_update(skip_locked=True)
            .values_list("id", "queue")[:batch]
        )
        if stale:
            Execution.objects.filter(pk__in=[pk for pk, _ in stale]).update(enqueued_at=Now())
    wakeups = [(pk, queue) for pk, queue, _ in due] + stale
    sent = sum(publish(pk, queue) for pk, queue in wakeups)
    if due or stale:
        logger.info("sweep: %d due, %d stale, %d sent", len(due), len(stale), sent)
    return {"due": len(due), "stale": len(stale), "sent": sent}


def _complete_timers(due: list[tuple[str, str, dict | None]]) -> None:
    """Record the due timers as over, for the whole batch in one statement.

    Each woken delivery would otherwise spend a write transaction on it. Safe here: the
    executions were waiting (no delivery holds them) and are locked by this transaction; a
    delivery that finds the record still waiting completes it itself. Matching executions and
    keys as two sets (not pairs, which SQLite's expression depth limits to ~500) is exact
    while an execution has at most one waiting sleep: a sleep suspends the run. Parallel
    waits will need pairs.
    """
    timers = {pk: waiting["step"] for pk, _, waiting in due if (waiting or {}).get("kind") == "timer"}
    if timers:
        StepRecord.objects.filter(
            execution_id__in=list(timers), key__in=set(timers.values()), kind="sleep", status=StepStatus.WAITING
        ).update(status=StepStatus.COMPLETED, attempts=1, finished_at=Now())
