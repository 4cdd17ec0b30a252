"""Starting executions: what is checked before anything is written, and the ``start`` verb."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable

from durableflow import dispatch, exceptions, values
from durableflow.engine.records import Claim, Continued
from durableflow.engine.states import ExecutionStatus
from durableflow.engine.storage import NOW
from durableflow.registry import Registry, WorkflowDefinition

if TYPE_CHECKING:
    from durableflow.engine.verbs import Engine

__all__ = ["StartRequest", "prepare_start", "check_repeat", "Starts", "MAX_ID_LENGTH"]

MAX_ID_LENGTH = 200


@dataclass(frozen=True)
class StartRequest:
    definition: WorkflowDefinition
    execution_id: str
    params: Any
    canonical_params: str
    idempotency_key: str | None


def prepare_start(
    registry: Registry,
    workflow: str | Callable[..., Any] | WorkflowDefinition,
    params: Any,
    *,
    execution_id: str | None = None,
    idempotency_key: str | None = None,
    max_payload_bytes: int | None = None,
) -> StartRequest:
    """Validate a start; raise ``WorkflowStartError`` before anything is written."""
    definition = registry.resolve(workflow)
    try:
        canonical, decoded = values.roundtrip(params, max_bytes=max_payload_bytes)
    except exceptions.WorkflowValueError as exc:
        raise exceptions.WorkflowStartError("INVALID_PARAMS", f"params: {exc.message}", **exc.detail) from None
    for name, value in (("execution_id", execution_id), ("idempotency_key", idempotency_key)):
        if value is None:
            continue
        if not isinstance(value, str) or not value or len(value) > MAX_ID_LENGTH:
            raise exceptions.WorkflowStartError(
                "INVALID_PARAMS", f"{name} must be a non-empty string of at most {MAX_ID_LENGTH} characters"
            )
        fault = values.text_fault(value)
        if fault is not None:
            raise exceptions.WorkflowStartError("INVALID_PARAMS", f"{name}: {fault}")
    return StartRequest(
        definition=definition,
        execution_id=execution_id or uuid.uuid4().hex,
        params=decoded,
        canonical_params=canonical,
        idempotency_key=idempotency_key,
    )


def check_repeat(request: StartRequest, workflow: str, params: Any) -> None:
    """A start that names an existing execution must ask for the same thing."""
    try:
        same = workflow == request.definition.name and values.encode(params) == request.canonical_params
    except exceptions.WorkflowValueError:  # stored before today's rules: not the same request
        same = False
    if not same:
        named = (
            f"idempotency key {request.idempotency_key!r}"
            if request.idempotency_key is not None
            else f"execution id {request.execution_id!r}"
        )
        raise exceptions.WorkflowStartError(
            "IDEMPOTENCY_CONFLICT",
            f"{named} already started workflow {workflow!r} with other params; use a new key for a new execution",
        )


class Starts:
    """The ``start`` verb (a mixin of ``Engine``)."""

    def start(
        self: Engine,
        workflow: str | Callable[..., Any] | WorkflowDefinition,
        params: Any = None,
        *,
        execution_id: str | None = None,
        idempotency_key: str | None = None,
        queue: str | None = None,
        parent_id: str | None = None,
        root_id: str | None = None,
    ) -> tuple[Any, bool]:
        """Write a new execution and ask for its delivery once the transaction commits.

        Returns ``(execution, created)``. A repeated ``idempotency_key`` (or
        ``execution_id``) returns the first execution, or raises ``IDEMPOTENCY_CONFLICT`` if
        it asked for something else. Invalid input raises ``WorkflowStartError`` and writes
        nothing. The storage's unique constraints, not a pre-check, decide what is a repeat.
        """
        request = prepare_start(
            self.registry,
            workflow,
            params,
            execution_id=execution_id,
            idempotency_key=idempotency_key,
            max_payload_bytes=self.settings.max_payload_bytes,
        )
        queue = queue or self.settings.default_queue
        execution = self.storage.create_execution(
            {
                "id": request.execution_id,
                "workflow": request.definition.name,
                "version": request.definition.version,
                "status": ExecutionStatus.PENDING,
                "params": request.params,
                "idempotency_key": idempotency_key,
                "queue": queue,
                "parent_id": parent_id,
                "root_id": root_id or request.execution_id,
                "enqueued_at": NOW,
                "created_at": NOW,
            }
        )
        if execution is None:
            existing = self.storage.get_execution(request.execution_id)
            if existing is None and idempotency_key is not None:
                existing = self.storage.find_execution(request.definition.name, idempotency_key)
            if existing is None:  # pragma: no cover - deleted between the insert and the read
                raise exceptions.WorkflowStartError("IDEMPOTENCY_CONFLICT", "the execution vanished; start again")
            check_repeat(request, existing.workflow, existing.params)
            return existing, False
        self.storage.enqueue(dispatch.DELIVER, (execution.id,), queue)
        return execution, True

    def continue_as(self: Engine, claim: Claim, outcome: Continued) -> Any:
        """Start the execution that carries ``claim``'s on (``ctx.continue_as_new``).

        Called in the transaction that completes the old one; its id is derived from the old
        one's, so a repeated outcome names the same execution.
        """
        execution, _ = self.start(
            claim.workflow,
            outcome.params,
            execution_id=outcome.execution_id,
            queue=claim.queue,
            parent_id=claim.parent_id,
            root_id=claim.root_id,
        )
        return execution
