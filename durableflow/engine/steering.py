"""Steering an execution from outside: cancel, retry, and reading its outcome."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Iterable

from durableflow import exceptions, values
from durableflow.engine import logs, names, observing
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
    from durableflow.engine.rows import ExecutionRow
    from durableflow.engine.verbs import Engine

__all__ = ["Steering", "is_stalled", "wake_moves", "nameable", "OUTCOME_FIELDS"]

# What ``outcome`` and ``final`` read of an execution: a waiting caller reads no more.
OUTCOME_FIELDS = ("id", "status", "result", "error", "continued_as")

logger = logs.logger("durableflow")

S = ExecutionStatus
_WAKEABLE = sources_for(S.PENDING) & DUE_ONLY


def wake_moves() -> dict[str, dict[str, Any]]:
    """What a wake-up writes, by the status it finds (``mark_executions``): a waiting execution
    becomes pending (its delivery is sent); one running now may suspend on what it read before
    this wake-up, so the wake-up is remembered on its row and its outcome becomes a replay
    (``Journal.finish``). Both kinds of rows are locked together, so none can move from one to
    the other unseen."""
    moves: dict[str, dict[str, Any]] = {
        status: {"status": S.PENDING, "wake_at": None, "enqueued_at": NOW} for status in _WAKEABLE
    }
    moves.update({status: {"wake_pending": True} for status in LEASED})
    return moves


def nameable(execution_id: Any) -> bool:
    """Whether ``execution_id`` is an id a start can have written (else it names nothing: a NUL
    would be a database error on PostgreSQL and a plain miss on SQLite; it is a miss everywhere)."""
    return isinstance(execution_id, str) and len(execution_id) <= MAX_ID_LENGTH and values.text_fault(execution_id) is None


def is_stalled(execution: Any) -> bool:
    """A waiting execution whose code did not match its journal (see ``driver._stall``)."""
    return execution.status == S.WAITING and (execution.waiting_for or {}).get("kind") == "stalled"


class Steering:
    """The steering verbs (a mixin of ``Engine``)."""

    def get(self: Engine, execution_id: str, fields: tuple[str, ...] | None = None) -> ExecutionRow:
        if not nameable(execution_id):
            raise exceptions.ExecutionNotFound(message=f"no execution {execution_id!r}")
        execution = self.storage.get_execution(execution_id, fields)
        if execution is None:
            raise exceptions.ExecutionNotFound(message=f"no execution {execution_id!r}")
        return execution

    def cancel(self: Engine, execution_id: str, reason: str | None = None, *, code: str | None = None) -> Any:
        """Cancel an unfinished execution; it never runs again.

        ``code`` is the recorded error's if not ``CANCELLED`` (``DEADLINE_EXCEEDED`` when the
        sweep cancels a run at its deadline); its children are cancelled with ``CANCELLED``.

        Clearing the lease token fences out a delivery that is running it: its next journal
        write matches nothing, so it stops at its next step boundary without an outcome, and a
        step it finishes afterwards has its result refused. An execution without a compensable
        step is ``cancelled`` at once. One with a compensable step must replay to compensate
        (its compensations are workflow code): the request is recorded (``cancel_requested``),
        the execution made runnable and delivered at once; that delivery stops at the first
        unfinished step, runs the compensations and records ``cancelled`` (see
        ``durableflow.engine.sagas``). A cancel of one already being cancelled changes nothing.
        Its unfinished children are cancelled too, each running its own compensations.
        """
        message = reason or "cancelled"
        error = {"code": "CANCELLED", "message": message} if code is None else {"code": code, "message": message}
        with self.storage.atomic():
            execution = self.get(execution_id)
            check_transition(execution_id, execution.status, S.CANCELLED, "cancelled")
            if execution.cancel_requested is not None:
                return execution  # being cancelled: its compensating delivery is not disturbed
            # Nothing may satisfy its waits or run its items any more. Closed before the row is
            # written: a publisher locks a waiter, then its execution; the same order here.
            self.storage.end_waits(execution_id, {"status": StepStatus.FAILED, "error": error, "finished_at": NOW})
            # The fence, and the row's lock until this commits: a compensable step's mark
            # (Journal.mark_compensable) is either read below or refused after this.
            fenced = self.storage.update_execution(
                execution_id,
                {"cancel_requested": error, "lease_token": None, "lease_expires_at": None},
                statuses=sources_for(S.CANCELLED),
            )
            if not fenced:
                raise exceptions.InvalidTransition(message=f"execution {execution_id} changed while being cancelled")
            if self.get(execution_id).compensable:
                self._request_unwind(execution_id)
            else:
                self._end_cancelled(execution_id, error)
            # Its unfinished children are not wanted any more either.
            for child in self.storage.execution_ids(parent_id=execution_id, statuses=RUNNABLE):
                self.cancel(child, f"its parent {execution_id} was cancelled")
            cancelled = self.get(execution_id)
        logger.info("execution %s cancelled: %s", execution_id, message, extra={"execution_id": execution_id})
        return cancelled

    def _end_cancelled(self: Engine, execution_id: str, error: dict[str, Any]) -> None:
        updated = self.storage.update_execution(
            execution_id,
            {"status": S.CANCELLED, "error": error, "wake_at": None, "finished_at": NOW},
            statuses=sources_for(S.CANCELLED),
        )
        if not updated:  # pragma: no cover - the row is held by this transaction
            raise exceptions.InvalidTransition(message=f"execution {execution_id} changed while being cancelled")
        # Read after the write, which holds the row: a wait registered on this execution's end
        # is either seen here or sees it cancelled.
        cancelled = self.get(execution_id)
        observing.announce(
            self.storage,
            self.settings.notify,
            observing.FINISHED,
            execution_id=execution_id,
            workflow=cancelled.workflow,
            status=S.CANCELLED,
            error=error,
        )
        if cancelled.watched:
            self.finished(execution_id)
        self.free_slots(cancelled.workflow, cancelled.concurrency_key)  # a holder's slot, with this commit

    def _request_unwind(self: Engine, execution_id: str) -> None:
        """Make a cancelled execution with compensations runnable now: its delivery compensates."""
        runnable = {"wake_at": None, "waiting_for": None, "enqueued_at": NOW}
        moves = {status: {"status": S.PENDING, **runnable} for status in sources_for(S.PENDING) & RUNNABLE}
        moves.update({status: runnable for status in RUNNABLE - set(moves)})  # pending already
        for _, queue, _ in self.storage.mark_executions([execution_id], moves):
            self.storage.enqueue(names.DELIVER, (execution_id,), queue)

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
            fields = {
                "status": S.PENDING,
                "error": None,
                "finished_at": None,
                "wake_at": None,
                "waiting_for": None,
                "enqueued_at": NOW,
            }
            # A failed run held no slot: it asks for one again, as a start does (a stalled one holds its own).
            limit = self._limit(execution.workflow)
            holds = (
                execution.status != S.FAILED
                or execution.concurrency_key is None
                or limit is None
                or self.take_slot(execution.workflow, execution.concurrency_key, limit, fields)
            )
            updated = self.storage.update_execution(execution_id, fields, statuses=[execution.status])
            if not updated:
                raise exceptions.InvalidTransition(message=f"execution {execution_id} changed while being retried")
            if holds:
                self.storage.enqueue(names.DELIVER, (execution_id,), execution.queue)
            # Read before the commit sends the delivery: the caller sees the run as retried,
            # not as whatever a fast worker made of it since.
            retried = self.get(execution_id)
        logger.info("execution %s retried", execution_id, extra={"execution_id": execution_id})
        return retried

    def wake(self: Engine, execution_ids: Iterable[str]) -> list[str]:
        """Make waiting executions runnable and ask for their deliveries once this commits.

        Every wake-up (a due timer, an event, a signal, a finished child, the last item of a
        map, a store change) goes through here: a conditional move from ``waiting`` to
        ``pending``, so an execution that is finished or already woken is left alone. One that
        is running is marked instead (``wake_pending``): should its delivery suspend, it is
        delivered again at once rather than left waiting for what already happened. Returns
        the ids moved to ``pending``. (The last item of a map makes the same moves in the write
        that records it: ``wake_moves``, ``deliver_woken``.)
        """
        return self.deliver_woken(self.storage.mark_executions(execution_ids, wake_moves()))

    def deliver_woken(self: Engine, moved: Iterable[tuple[str, str, str]]) -> list[str]:
        """Ask for the deliveries of the executions ``wake_moves`` moved to ``pending`` (``moved``:
        what ``mark_executions`` returned), once the transaction commits; their ids."""
        by_queue: dict[str, list[str]] = {}
        for execution_id, queue, status in moved:
            if status in _WAKEABLE:
                by_queue.setdefault(queue, []).append(execution_id)
        for queue, ids in by_queue.items():
            if len(ids) == 1:
                self.storage.enqueue(names.DELIVER, (ids[0],), queue)
            else:
                self.storage.enqueue_many(names.DELIVER, [(execution_id,) for execution_id in ids], queue)
        return [execution_id for ids in by_queue.values() for execution_id in ids]

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
            execution = self.get(execution.continued_as, OUTCOME_FIELDS)
        return execution
