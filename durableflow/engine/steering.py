"""Steering an execution from outside: cancel, retry, and reading its outcome."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any, Iterable

from durableflow import dispatch, exceptions, values
from durableflow.engine.records import retry_target
from durableflow.engine.starts import MAX_ID_LENGTH
from durableflow.engine.states import (
    DUE_ONLY,
    LEASED,
    RUNNABLE,
    TERMINAL,
    ExecutionStatus,
    StepStatus,
    check_transition,
    sources_for,
)
from durableflow.engine.storage import NOW

if TYPE_CHECKING:
    from durableflow.engine.verbs import Engine

__all__ = ["Steering", "is_stalled"]

logger = logging.getLogger("durableflow")

S = ExecutionStatus
_WAKEABLE = sources_for(S.PENDING) & DUE_ONLY


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
            # Nothing may satisfy its waits or run its items any more. Closed before the row is
            # written: a publisher locks a waiter, then its execution; the same order here.
            self.storage.end_waits(
                execution_id,
                {"status": StepStatus.FAILED, "error": {"code": "CANCELLED", "message": message}, "finished_at": NOW},
            )
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
            # Read after the write, which holds the row: a wait registered on this execution's end
            # is either seen here or sees it cancelled.
            if self.get(execution_id).watched:
                self.finished(execution_id)
            # Its unfinished children are not wanted any more either.
            for child in self.storage.execution_ids(parent_id=execution_id, statuses=RUNNABLE):
                self.cancel(child, f"its parent {execution_id} was cancelled")
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

        Every wake-up (a due timer, an event, a signal, a finished child, the last item of a
        map, a store change) goes through here: a conditional move from ``waiting`` to
        ``pending``, so an execution that is finished or already woken is left alone. One that
        is running is marked instead (``wake_pending``): should its delivery suspend, it is
        delivered again at once rather than left waiting for what already happened. Returns
        the ids moved to ``pending``.
        """
        moves = {status: {"status": S.PENDING, "wake_at": None, "enqueued_at": NOW} for status in _WAKEABLE}
        # One running now may suspend on what it read before this wake-up: remember the wake-up
        # on its row, and its outcome becomes a replay (Journal.finish). Both kinds of rows are
        # locked together, so none can move from one to the other unseen.
        moves.update({status: {"wake_pending": True} for status in LEASED})
        woken = []
        for execution_id, queue, status in self.storage.mark_executions(execution_ids, moves):
            if status in _WAKEABLE:
                self.storage.enqueue(dispatch.DELIVER, (execution_id,), queue)
                woken.append(execution_id)
        return woken

    def outcome(self: Engine, execution: Any) -> tuple[bool, Any]:
        """``(True, result)`` for a completed execution, ``(False, None)`` for an unfinished one.

        Raises ``ExecutionFailed`` (with the status and error) for one that ended otherwise. An
        execution that continued as new answers with the outcome of the one that carries it on.
        """
        execution = self.final(execution)
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

    def final(self: Engine, execution: Any) -> Any:
        """The execution that carries ``execution`` on: follows ``continue_as_new`` links."""
        while execution.status == S.COMPLETED and execution.continued_as:
            execution = self.get(execution.continued_as)
        return execution
