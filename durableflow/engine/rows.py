"""The rows a storage returns, as protocols: the attributes the engine reads of each.

The ORM storage returns model instances, the in-memory one dataclasses
(``durableflow.engine.memory``); both are checked against these protocols by the type checker
(``tests/repository/test_architecture.py``). A row is a snapshot: changing its attributes changes nothing stored,
the storage's conditional writes do.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Protocol

__all__ = ["ExecutionRow", "WaiterRow", "EventRow", "EffectRow", "StoreRow", "AppliedRow", "StoreWaiterRow"]


class ExecutionRow(Protocol):
    """An execution (the ``Execution`` model)."""

    id: str
    workflow: str
    version: str
    params: Any
    status: str
    result: Any
    error: dict[str, Any] | None
    idempotency_key: str | None
    queue: str
    parent_id: str | None
    root_id: str | None
    metadata: dict[str, Any]
    created_at: datetime | None
    enqueued_at: datetime | None
    started_at: datetime | None
    finished_at: datetime | None
    wake_at: datetime | None
    deadline_at: datetime | None
    waiting_for: dict[str, Any] | None
    lease_token: str | None
    lease_expires_at: datetime | None
    lease_holder: str | None
    deliveries: int
    lost_deliveries: int
    concurrency_key: str | None
    concurrency_ticket: int | None
    watched: bool
    wake_pending: bool
    continued_as: str | None
    compensable: bool
    cancel_requested: dict[str, Any] | None
    compensations: list[dict[str, Any]] | None
    origin_id: str | None
    origin_kind: str | None
    origin_step: str | None
    seed: str | None


class WaiterRow(Protocol):
    """A step waiting for an event, a signal, a token or a child (the ``Waiter`` model)."""

    id: int
    execution_id: str
    key: str
    kind: str
    target: str
    match: Any
    status: str
    event_id: int | None  # the event that satisfied it
    settles: bool  # whoever satisfies it may complete its step's record
    created_at: datetime | None
    deadline_at: datetime | None
    resolved_at: datetime | None


class EventRow(Protocol):
    """A published event, signal or token completion (the ``Event`` model)."""

    id: int
    kind: str
    name: str
    event_id: str
    execution_id: str | None
    payload: Any
    created_at: datetime | None


class EffectRow(Protocol):
    """An effect (the ``Effect`` model)."""

    id: str
    operation: str
    input: Any
    input_digest: str
    status: str
    began_by: str
    began_step: str
    result: Any
    settled_by: str | None
    holder_id: str | None
    holder_token: str | None
    attempts: int
    created_at: datetime | None
    updated_at: datetime | None
    settled_at: datetime | None


class StoreRow(Protocol):
    """A store instance (the ``Store`` model)."""

    name: str
    store_id: str
    instance_id: str
    version: int
    state: Any
    has_waiters: bool
    created_at: datetime | None
    updated_at: datetime | None


class AppliedRow(Protocol):
    """The ledger entry of a step that changed a store (the ``StoreLedger`` model)."""

    execution_id: str
    key: str
    kind: str
    name: str
    store_id: str
    instance_id: str
    version: int
    outcome: Any
    applied_at: datetime | None


class StoreWaiterRow(Protocol):
    """A step waiting for a store to change from what it read (the ``StoreWaiter`` model)."""

    id: int
    execution_id: str
    key: str
    name: str
    store_id: str
    instance_id: str
    version: int
    reads: list[dict[str, Any]]
    created_at: datetime | None
    woken_at: datetime | None
