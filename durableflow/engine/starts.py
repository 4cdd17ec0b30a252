"""What every backend checks before it writes a new execution."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any, Callable

from durableflow import exceptions, values
from durableflow.registry import Registry, WorkflowDefinition

__all__ = ["StartRequest", "prepare_start", "check_repeat", "MAX_ID_LENGTH"]

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
        raise exceptions.WorkflowStartError("INVALID_PARAMS", f"params: {exc.message}") from None
    for name, value in (("execution_id", execution_id), ("idempotency_key", idempotency_key)):
        if value is not None and (not isinstance(value, str) or not value or len(value) > MAX_ID_LENGTH):
            raise exceptions.WorkflowStartError(
                "INVALID_PARAMS", f"{name} must be a non-empty string of at most {MAX_ID_LENGTH} characters"
            )
    return StartRequest(
        definition=definition,
        execution_id=execution_id or uuid.uuid4().hex,
        params=decoded,
        canonical_params=canonical,
        idempotency_key=idempotency_key,
    )


def check_repeat(request: StartRequest, workflow: str, params: Any) -> None:
    """A start that names an existing execution must ask for the same thing."""
    if workflow != request.definition.name or values.encode(params) != request.canonical_params:
        named = (
            f"idempotency key {request.idempotency_key!r}"
            if request.idempotency_key is not None
            else f"execution id {request.execution_id!r}"
        )
        raise exceptions.WorkflowStartError(
            "IDEMPOTENCY_CONFLICT",
            f"{named} already started workflow {workflow!r} with other params; use a new key for a new execution",
        )
