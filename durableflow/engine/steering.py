"""Steering an execution from outside: cancel, retry, and reading its outcome."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any, Iterable

from durableflow import dispatch, exceptions, values
from durableflow.engine.records import retry_target
from durableflow.engine.starts import MAX_ID_LENGTH
from durableflow.engine.states import DUE_ONLY, TERMINAL, ExecutionStatus, StepStatus, check_transition, sources_for
from durableflow.engine.storage import NOW

if TYPE_CHECKING:
    from durableflow.engine.verbs import Engine

__all__ = ["Steering", "is_stalled"]

logger = logging.getLogger("durableflow")

S = ExecutionStatus


def is_stalled(execution: Any) -> bool:
    """A waiting execution whose code did not match its journal (see ``driver._stall``)."""
    return execution.status == S.WAITING and (execution.waiting_for or {}).get("kind") == "stalled"


class Steering:
    """The steering verbs (a mixin of ``Engine``)."""

    def get(self: Engine, execution_id: str) -> Any:
        # An id no start can have written is not looked up: a NUL would be a database error
        # on PostgreSQL and a plain miss on SQLite; it is a miss everywhere.
        if not isinstance(execution_id, str) or len(execution_id) > MAX_ID_LENGTH or values.text_fault(execution_id):
            raise exceptions.ExecutionNotFound(message=f"no execution {execution_id!r}")
        execution = self.storage.get_execution(execution_id)
        if execution is None:
            raise exceptions.ExecutionNotFound(message=f"no execution {execution_id!r}")
        return execution

    def cancel(self: Engine, execution_id: str, reason: str | None = None) -> Any:
        """Cancel an unfinished execution; it never runs again.

        Clearing the lease token fences out a delivery that is running it: its next journal
        write matches nothing, so it stops at its next step boundary without an outcome.
        """
        message = reason or "cancelled"
        with self.storage.atomic():
            execution = self.get(execution_id)
            check_transition(execution_id, execution.status, S.CANCELLED, "cancelled")
            updated = self.storage.update_execution(
                execution_id,
                {
                    "status": S.CANCELLED,
                    "error": {"code": "CANCELLED", "message": message},
                    "lease_token": None,
                    "lease_expires_at": None,
                    "wake_at": None,
                    "finished_at": NOW,
                },
                statuses=sources_for(S.CANCELLED),
            )
            if not updated:
                raise exceptions.InvalidTransition(message=f"execution {execution_id} changed while being cancelled")
        logger.info("execution %s cancelled: %s", execution_id, message)
        return self.get(execution_id)

    def retry(self: Engine, execution_id: str) -> Any:
        """Resume a failed (or stalled) execution from the step that failed it.

        Completed steps replay; the failed step gets a fresh set of attempts.
        """
        with self.storage.atomic():
            execution = self.get(execution_id)
            if execution.status != S.FAILED and not is_stalled(execution):
                raise exceptions.InvalidTransition(
                    message=f"execution {execution_id} is {execution.status}; only a failed run can be retried",
                    status=execution.status,
                )
            check_transition(execution_id, execution.status, S.PENDING, "retried")
            step = retry_target(execution.error)
            if step is not None:
                self.storage.update_step(
                    execution_id,
                    step,
                    {"status": StepStatus.WAITING, "attempts": 0, "finished_at": None},
                    statuses=[StepStatus.FAILED],
                )
            updated = self.storage.update_execution(
                execution_id,
                {
                    "status": S.PENDING,
                    "error": None,
                    "finished_at": None,
                    "wake_at": None,
                    "waiting_for": None,
                    "enqueued_at": NOW,
                },
                statuses=[execution.status],
            )
            if not updated:
                raise exceptions.InvalidTransition(message=f"execution {execution_id} changed while being retried")
            self.storage.enqueue(dispatch.DELIVER, (execution_id,), execution.queue)
            # Read before the commit sends the delivery: the caller sees the run as retried,
            # not as whatever a fast worker made of it since.
            retried = self.get(execution_id)
        logger.info("execution %s retried", execution_id)
        return retried

    def wake(self: Engine, execution_ids: Iterable[str]) -> list[str]:
        """Make waiting executions runnable and ask for their deliveries once this commits.

        Every wake-up (a due timer, an event, a signal, a finished child, a store change) goes
        through here: a conditional move from ``waiting`` to ``pending``, so an execution that
        is running, finished or already woken is left alone. Returns the ids woken.
        """
        woken = self.storage.update_executions(
            execution_ids,
            {"status": S.PENDING, "wake_at": None, "enqueued_at": NOW},
            statuses=sources_for(S.PENDING) & DUE_ONLY,
        )
        for execution_id, queue in woken:
            self.storage.enqueue(dispatch.DELIVER, (execution_id,), queue)
        return [execution_id for execution_id, _ in woken]

    def outcome(self: Engine, execution: Any) -> tuple[bool, Any]:
        """``(True, result)`` for a completed execution, ``(False, None)`` for an unfinished one.

        Raises ``ExecutionFailed`` (with the status and error) for one that ended otherwise.
        """
        if execution.status == S.COMPLETED:
            return True, execution.result
        if execution.status in TERMINAL:
            error = execution.error or {}
            raise exceptions.ExecutionFailed(
                message=f"execution {execution.id} is {execution.status}: {error.get('message', '')}".rstrip(": "),
                status=execution.status,
                error=error,
            )
        return False, None
