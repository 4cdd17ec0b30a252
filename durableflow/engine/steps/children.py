"""``ctx.step.start``, ``wait_for_execution``, ``invoke``: workflows composed of workflows.

A child is started in the transaction that records the ``start`` step, under an id derived
from the parent's id and the step key: it exists if and only if the step is recorded, and
every replay names the same child. Waiting for an execution registers a waiter and marks
that execution as watched in one transaction, then reads its status; the execution's
outcome returns the mark in the same statement that writes it, so whichever comes second
sees the other (see ``Journal.finish``): a finished child wakes its waiting parent at once.
"""

from __future__ import annotations

import uuid
from typing import Any, Callable

from durableflow import exceptions
from durableflow.engine.context import MAX_KEY_LENGTH
from durableflow.engine.states import TERMINAL, ExecutionStatus, WaiterStatus
from durableflow.engine.steps.waits import PENDING, WaitSteps
from durableflow.engine.storage import NOW
from durableflow.engine.waits import CHILD

__all__ = ["ChildSteps", "child_execution_id"]

W = WaiterStatus
_START_SUFFIX = ":start"


def child_execution_id(parent_id: str, key: str) -> str:
    """The id of the child a parent starts at ``key`` (the same on every replay)."""
    return uuid.uuid5(uuid.NAMESPACE_URL, f"durableflow:child:{parent_id}\x00{key}").hex


class ChildSteps(WaitSteps):
    def start(
        self, key: str, workflow: str | Callable[..., Any], params: Any = None, *, deadline: Any = None
    ) -> str:
        """Start a child execution (same root, this one as parent) and return its id.

        Idempotent: every replay returns the same id without starting anything. A refused
        start (unknown workflow, invalid params, a bad ``deadline``) is recorded and raised at
        this step. ``deadline``: as ``durableflow.start``'s, counted from the child's start.
        """
        ctx = self._ctx
        delivery = self._delivery
        if not isinstance(key, str):
            raise TypeError("ctx.step.start() needs a step key first")
        key, _ = delivery.key((key,))
        replayed = delivery.replayed(key, "start")
        if replayed.done:
            return replayed.value
        record = replayed.record
        delivery.go_live()
        journal = delivery.journal
        child_id = child_execution_id(ctx.execution_id, key)
        started = journal.now()
        try:
            # The child exists if and only if this step is recorded: a lost lease rolls both back.
            with journal.storage.atomic():
                child, _ = delivery.engine.start(
                    workflow,
                    params,
                    execution_id=child_id,
                    parent_id=ctx.execution_id,
                    root_id=ctx.root_id,
                    queue=journal.queue,
                    deadline=deadline,
                )
                delivery.record_live(key, "start", child_id, attempts=1, meta={"workflow": child.workflow})
        except exceptions.WorkflowStartError as exc:
            self._record_failure("start", key, record, 1, exc, started)
        return child_id

    def wait_for_execution(self, key: str, execution_id: str, *, timeout: float | None = None) -> Any:
        """Wait until another execution ends; return its result.

        A child that did not complete raises ``ChildExecutionError`` (with its status and
        error); one that continued as new is followed to the one that carries it on.
        """
        if not isinstance(execution_id, str) or not execution_id:
            raise TypeError("ctx.step.wait_for_execution(key, execution_id) needs an execution id")
        storage = self._delivery.journal.storage
        return self._await(
            key,
            "wait_execution",
            CHILD,
            execution_id,
            timeout,
            {"kind": CHILD, "execution_id": execution_id},
            check=self._child_check,
            on_register=lambda: storage.watch_execution(execution_id),
        )

    def invoke(
        self, key: str, workflow: str | Callable[..., Any], params: Any = None, *, timeout=None, deadline=None
    ) -> Any:
        """``start`` (at ``"<key>:start"``) and ``wait_for_execution`` (at ``key``): the child's
        result. ``deadline`` is the child's (a child cancelled at it raises ``ChildExecutionError``)."""
        if isinstance(key, str) and len(key) > MAX_KEY_LENGTH - len(_START_SUFFIX):
            raise exceptions.WorkflowValueError(
                "INVALID_STEP_KEY", f"invoke key {key[:40]!r}...: at most {MAX_KEY_LENGTH - len(_START_SUFFIX)} characters"
            )
        if not isinstance(key, str):
            raise TypeError("ctx.step.invoke() needs a step key first")
        child_id = self.start(f"{key}{_START_SUFFIX}", workflow, params, deadline=deadline)
        return self.wait_for_execution(key, child_id, timeout=timeout)

    def _child_check(self, waiter: Any) -> Any:
        if waiter.status == W.EXPIRED:
            return PENDING
        storage = self._delivery.journal.storage
        execution = storage.get_execution(waiter.target)
        while execution is not None and execution.status == ExecutionStatus.COMPLETED and execution.continued_as:
            # It continued as new: wait for the one that carries it on (registered, then read).
            following = execution.continued_as
            with storage.atomic():
                storage.update_waiter(waiter.id, {"target": following}, statuses=[W.OPEN])
                storage.watch_execution(following)
            execution = storage.get_execution(following)
        if execution is None:
            raise exceptions.ExecutionNotFound(message=f"there is no execution {waiter.target!r} to wait for")
        if execution.status not in TERMINAL:
            return PENDING
        storage.update_waiter(waiter.id, {"status": W.SATISFIED, "resolved_at": NOW}, statuses=[W.OPEN])
        if execution.status == ExecutionStatus.COMPLETED:
            return execution.result, {"execution_id": execution.id}
        error = execution.error or {}
        raise exceptions.ChildExecutionError(
            message=f"child execution {execution.id} is {execution.status}: {error.get('message', '')}".rstrip(": "),
            execution_id=execution.id,
            status=execution.status,
            error={name: error[name] for name in ("type", "code", "message", "step", "detail") if name in error},
        )
