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
from contextvars import ContextVar
from typing import Any, Callable

from durableflow import exceptions
from durableflow.engine import driver, names
from durableflow.engine.context import MAX_KEY_LENGTH
from durableflow.engine.states import TERMINAL, ExecutionStatus, WaiterStatus
from durableflow.engine.steps.waits import PENDING, WaitSteps
from durableflow.engine.storage import NOW
from durableflow.engine.waits import CHILD

__all__ = ["ChildSteps", "child_execution_id"]

W = WaiterStatus
_START_SUFFIX = ":start"
# Children delivered inside their parent's delivery, one within another: beyond this depth they are
# sent to the workers (a stack of deliveries in one process is a stack of Python frames).
MAX_INLINE_DEPTH = 4
_INLINE_DEPTH: ContextVar[int] = ContextVar("durableflow_inline_depth", default=0)


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
        return self._start_child(key, workflow, params, deadline, inline=False)

    def _start_child(self, key: str, workflow: Any, params: Any, deadline: Any, *, inline: bool) -> str:
        """``start``; ``inline``: deliver the new child here, in this delivery, before going on (see ``invoke``)."""
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
        inline = inline and _INLINE_DEPTH.get() < MAX_INLINE_DEPTH
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
                    send=not inline,
                )
                delivery.record_live(key, "start", child_id, attempts=1, meta={"workflow": child.workflow})
        except exceptions.WorkflowStartError as exc:
            self._record_failure("start", key, record, 1, exc, started)
        if inline:
            self._deliver_inline(child_id)
        return child_id

    def _deliver_inline(self, child_id: str) -> None:
        """Deliver the child just started in this delivery (its lease its own, this one's kept
        renewed meanwhile), instead of sending it to another worker and suspending until it ends:
        a child that completes here is waited for without a wake-up, a message or a second
        delivery of this one. One this delivery cannot claim (a concurrency slot it waits for, a
        database failure) is sent as any start is; should this process die meanwhile, the sweep
        sends it (it is pending, or its lease lapses)."""
        delivery = self._delivery
        depth = _INLINE_DEPTH.set(_INLINE_DEPTH.get() + 1)
        try:
            happened = delivery.engine.deliver(child_id)
        finally:
            _INLINE_DEPTH.reset(depth)
        if happened in (driver.SKIPPED, driver.LEASE_LOST, driver.FAULT):
            delivery.journal.storage.enqueue(names.DELIVER, (child_id,), delivery.journal.queue)

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
            early=lambda: self._child_outcome(storage.get_execution(execution_id), execution_id),
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
        # The child is delivered here at once: a short one ends within this delivery, which then
        # goes on with its result (no waiter, wake-up or second delivery of this one).
        child_id = self._start_child(f"{key}{_START_SUFFIX}", workflow, params, deadline, inline=True)
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
        if execution is not None and execution.status in TERMINAL:
            storage.update_waiter(waiter.id, {"status": W.SATISFIED, "resolved_at": NOW}, statuses=[W.OPEN])
        return self._child_outcome(execution, waiter.target)

    def _child_outcome(self, execution: Any, execution_id: str) -> Any:
        """What a wait for ``execution`` returns: PENDING while it is unfinished (or continued as
        new: followed by the waiter), its result if it completed; raises ``ChildExecutionError``
        if it ended otherwise, ``ExecutionNotFound`` if there is none."""
        if execution is None:
            raise exceptions.ExecutionNotFound(message=f"there is no execution {execution_id!r} to wait for")
        if execution.status not in TERMINAL or execution.continued_as:
            return PENDING
        if execution.status == ExecutionStatus.COMPLETED:
            return execution.result, {"execution_id": execution.id}
        error = execution.error or {}
        raise exceptions.ChildExecutionError(
            message=f"child execution {execution.id} is {execution.status}: {error.get('message', '')}".rstrip(": "),
            execution_id=execution.id,
            status=execution.status,
            error={name: error[name] for name in ("type", "code", "message", "step", "detail") if name in error},
        )
