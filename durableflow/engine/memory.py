"""An in-memory journal and backend: no database, a clock you move by hand.

Held to the same contract suite as the ORM journal. ``durableflow.testing`` builds on it
so that a project can test its workflows in plain unit tests.
"""

from __future__ import annotations

import copy
import threading
import uuid
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any, Callable

from durableflow import exceptions
from durableflow.engine import driver
from durableflow.engine.context import EngineSettings
from durableflow.engine.journal import (
    RUNNABLE,
    TERMINAL,
    Claim,
    ExecutionStatus,
    LeaseLost,
    Outcome,
    StepConflict,
    StepRecordData,
    StepStatus,
    outcome_fields,
    retry_target,
    same_outcome,
)
from durableflow.engine.starts import check_repeat, prepare_start
from durableflow.registry import Registry
from durableflow.registry import registry as default_registry

__all__ = ["ManualClock", "MemoryExecution", "InMemoryBackend", "InMemoryJournal"]

S = ExecutionStatus


class ManualClock:
    """A clock that only moves when told to."""

    def __init__(self, start: datetime | None = None):
        self._now = start or datetime.now(timezone.utc)

    def __call__(self) -> datetime:
        return self._now

    def advance(self, seconds: float) -> None:
        self._now += timedelta(seconds=seconds)


@dataclass
class MemoryExecution:
    id: str
    workflow: str
    version: str
    params: Any
    status: str = S.PENDING
    result: Any = None
    error: dict[str, Any] | None = None
    idempotency_key: str | None = None
    parent_id: str | None = None
    root_id: str | None = None
    created_at: datetime | None = None
    started_at: datetime | None = None
    finished_at: datetime | None = None
    wake_at: datetime | None = None
    waiting_for: dict[str, Any] | None = None
    lease_token: str | None = None
    lease_expires_at: datetime | None = None
    deliveries: int = 0
    records: dict[str, StepRecordData] = field(default_factory=dict, repr=False)


class InMemoryBackend:
    """Executions and their journals in dictionaries, guarded by one lock."""

    def __init__(
        self,
        registry: Registry = default_registry,
        *,
        clock: Callable[[], datetime] | None = None,
        lease_seconds: float = 60,
        settings: EngineSettings | None = None,
    ):
        self.registry = registry
        self.clock = clock or ManualClock()
        self.lease_seconds = lease_seconds
        self.settings = settings or EngineSettings()
        self.executions: dict[str, MemoryExecution] = {}
        self.lock = threading.RLock()

    # Steering -------------------------------------------------------------------------

    def start(self, workflow, params=None, *, execution_id=None, idempotency_key=None) -> MemoryExecution:
        request = prepare_start(
            self.registry,
            workflow,
            params,
            execution_id=execution_id,
            idempotency_key=idempotency_key,
            max_payload_bytes=self.settings.max_payload_bytes,
        )
        with self.lock:
            existing = self.executions.get(request.execution_id)
            if existing is None and idempotency_key is not None:
                existing = next(
                    (
                        e
                        for e in self.executions.values()
                        if e.workflow == request.definition.name and e.idempotency_key == idempotency_key
                    ),
                    None,
                )
            if existing is not None:
                check_repeat(request, existing.workflow, existing.params)
                return existing
            execution = MemoryExecution(
                id=request.execution_id,
                workflow=request.definition.name,
                version=request.definition.version,
                params=request.params,
                idempotency_key=idempotency_key,
                root_id=request.execution_id,
                created_at=self.clock(),
            )
            self.executions[execution.id] = execution
            return execution

    def cancel(self, execution_id: str, reason: str | None = None) -> MemoryExecution:
        with self.lock:
            execution = self.get(execution_id)
            if execution.status in TERMINAL:
                raise exceptions.InvalidTransition(
                    message=f"execution {execution_id} is {execution.status} and cannot be cancelled"
                )
            execution.status = S.CANCELLED
            execution.error = {"code": "CANCELLED", "message": reason or "cancelled"}
            execution.finished_at = self.clock()
            execution.lease_token = execution.lease_expires_at = execution.wake_at = None
            return execution

    def retry(self, execution_id: str) -> MemoryExecution:
        with self.lock:
            execution = self.get(execution_id)
            stalled = execution.status == S.WAITING and (execution.waiting_for or {}).get("kind") == "stalled"
            if execution.status != S.FAILED and not stalled:
                raise exceptions.InvalidTransition(
                    message=f"execution {execution_id} is {execution.status}; only a failed run can be retried"
                )
            record = execution.records.get(retry_target(execution.error) or "")
            if record is not None and record.status == StepStatus.FAILED:
                record.status, record.attempts, record.finished_at = StepStatus.WAITING, 0, None
            execution.status, execution.error, execution.finished_at = S.PENDING, None, None
            execution.wake_at = execution.waiting_for = None
            return execution

    # Deliveries -----------------------------------------------------------------------

    def journal(self, execution_id: str) -> InMemoryJournal:
        return InMemoryJournal(self, execution_id)

    def deliver(self, execution_id: str) -> str:
        return driver.deliver(self.journal(execution_id), self.registry, self.settings)

    def runnable(self) -> list[str]:
        now = self.clock()
        with self.lock:
            return [e.id for e in self.executions.values() if _claimable(e, now)]

    def run(self, max_deliveries: int = 10_000) -> int:
        """Deliver every runnable execution until none is left; return the number of deliveries."""
        count = 0
        while count < max_deliveries:
            ready = self.runnable()
            if not ready:
                return count
            for execution_id in ready:
                self.deliver(execution_id)
                count += 1
        raise RuntimeError(f"still runnable after {max_deliveries} deliveries: does a workflow loop?")

    def advance(self, seconds: float) -> None:
        if not isinstance(self.clock, ManualClock):
            raise TypeError("advance() needs the backend's ManualClock")
        self.clock.advance(seconds)

    # Reading --------------------------------------------------------------------------

    def get(self, execution_id: str) -> MemoryExecution:
        try:
            return self.executions[execution_id]
        except KeyError:
            raise exceptions.ExecutionNotFound(message=f"no execution {execution_id!r}") from None

    def records(self, execution_id: str) -> list[StepRecordData]:
        with self.lock:
            return copy.deepcopy(list(self.get(execution_id).records.values()))


def _claimable(execution: MemoryExecution, now: datetime) -> bool:
    if execution.status not in RUNNABLE:
        return False
    if execution.status == S.WAITING and (execution.wake_at is None or execution.wake_at > now):
        return False
    return execution.lease_token is None or execution.lease_expires_at <= now


class InMemoryJournal:
    """One delivery's lease on one in-memory execution."""

    def __init__(self, backend: InMemoryBackend, execution_id: str):
        self.backend = backend
        self.execution_id = execution_id
        self.token = uuid.uuid4().hex
        self.lost = False

    def claim(self) -> Claim | None:
        backend = self.backend
        with backend.lock:
            execution = backend.executions.get(self.execution_id)
            now = backend.clock()
            if execution is None or not _claimable(execution, now):
                return None
            execution.status = S.RUNNING
            execution.lease_token = self.token
            execution.lease_expires_at = now + timedelta(seconds=backend.lease_seconds)
            execution.deliveries += 1
            execution.started_at = execution.started_at or now
            return Claim(
                execution_id=execution.id,
                workflow=execution.workflow,
                version=execution.version,
                params=copy.deepcopy(execution.params),
                records=copy.deepcopy(execution.records),
                now=now,
                delivery=execution.deliveries,
                parent_id=execution.parent_id,
                root_id=execution.root_id,
                waiting_for=copy.deepcopy(execution.waiting_for),
            )

    def now(self) -> datetime:
        return self.backend.clock()

    def lease_lost(self) -> bool:
        return self.lost

    def _fenced(self) -> MemoryExecution:
        execution = self.backend.executions[self.execution_id]
        if execution.lease_token != self.token:
            self.lost = True
            raise LeaseLost(self.execution_id)
        return execution

    def write_step(self, record: StepRecordData, *, new: bool) -> None:
        with self.backend.lock:
            execution = self._fenced()
            existing = execution.records.get(record.key)
            if new and existing is not None:
                if not same_outcome(existing, record):
                    raise StepConflict(f"step {record.key!r} is already recorded with another outcome")
                return
            execution.records[record.key] = copy.deepcopy(record)

    def finish(self, outcome: Outcome) -> None:
        with self.backend.lock:
            execution = self._fenced()
            fields, _ = outcome_fields(outcome, self.backend.clock())
            for name, value in fields.items():
                setattr(execution, name, copy.deepcopy(value))

    def close(self) -> None:
        pass
