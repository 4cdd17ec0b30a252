"""The in-memory storage's core: executions, the journal and the sweep, in dictionaries.

It implements ``durableflow.engine.storage.Storage`` and nothing else: the verbs that run
on it are the engine's, the same the workers run on the ORM storage. ``durableflow.testing``
builds a tester on it so that a project can test its workflows in plain unit tests.

Transactions: one lock serialises every call (as SQLite serialises writers); ``atomic()``
copies the tables on entry and puts the copy back if the block raises, so a verb that fails
halfway leaves nothing behind, as a rolled-back database transaction would.
"""

from __future__ import annotations

import contextlib
import threading
from dataclasses import dataclass, field, fields
from datetime import datetime, timedelta, timezone
from operator import attrgetter
from typing import TYPE_CHECKING, Any, Callable, Iterable, Iterator, cast

from durableflow.engine import predicates
from durableflow.engine.memory.clone import clone
from durableflow.engine.records import RECORD_FIELDS, StepRecordData
from durableflow.engine.states import TERMINAL, ExecutionStatus
from durableflow.engine.storage import ANY, NOW, ClaimRow, LeaseHandle, OutcomeRow

if TYPE_CHECKING:  # the rows of the other parts' tables
    from durableflow.engine.memory.effects import MemoryEffect
    from durableflow.engine.memory.ratelimits import MemoryAdmission
    from durableflow.engine.memory.stores import MemoryLedgerEntry, MemoryStore, MemoryStoreWaiter
    from durableflow.engine.memory.waits import MemoryEvent, MemoryWaiter

__all__ = ["ManualClock", "MemoryExecution", "MemoryTables", "MemoryCore"]

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
    """An execution row: the attributes of the ``Execution`` model that the engine reads."""

    id: str
    workflow: str
    version: str
    params: Any
    status: str = S.PENDING
    result: Any = None
    error: dict[str, Any] | None = None
    idempotency_key: str | None = None
    queue: str = ""
    parent_id: str | None = None
    root_id: str | None = None
    metadata: dict[str, Any] = field(default_factory=dict)
    created_at: datetime | None = None
    enqueued_at: datetime | None = None
    started_at: datetime | None = None
    finished_at: datetime | None = None
    wake_at: datetime | None = None
    deadline_at: datetime | None = None
    waiting_for: dict[str, Any] | None = None
    lease_token: str | None = None
    lease_expires_at: datetime | None = None
    lease_holder: str | None = None
    deliveries: int = 0
    lost_deliveries: int = 0
    trace_context: dict[str, str] | None = None
    concurrency_key: str | None = None
    concurrency_ticket: int | None = None
    watched: bool = False
    wake_pending: bool = False
    continued_as: str | None = None
    compensable: bool = False
    cancel_requested: dict[str, Any] | None = None
    compensations: list[dict[str, Any]] | None = None
    origin_id: str | None = None
    origin_kind: str | None = None
    origin_step: str | None = None
    seed: str | None = None


_EXECUTION_FIELDS = frozenset(f.name for f in fields(MemoryExecution))


@dataclass
class MemoryTables:
    """Every table of the in-memory storage (copied whole by ``atomic``)."""

    executions: dict[str, MemoryExecution] = field(default_factory=dict)
    steps: dict[str, dict[str, StepRecordData]] = field(default_factory=dict)
    # durableflow.engine.memory.waits
    waiters: dict[int, MemoryWaiter] = field(default_factory=dict)
    events: dict[int, MemoryEvent] = field(default_factory=dict)
    next_id: int = 1
    # Effects by id, and their watches: effect id -> {(execution id, step key): since}.
    effects: dict[str, MemoryEffect] = field(default_factory=dict)
    effect_watches: dict[str, dict[tuple[str, str], datetime]] = field(default_factory=dict)
    # Stores (durableflow.engine.memory.stores): by (name, store_id), and by (execution_id, key).
    stores: dict[tuple[str, str], MemoryStore] = field(default_factory=dict)
    store_ledger: dict[tuple[str, str], MemoryLedgerEntry] = field(default_factory=dict)
    store_waiters: dict[tuple[str, str], MemoryStoreWaiter] = field(default_factory=dict)
    # Rate-limit admissions and waiting requests by id (durableflow.engine.memory.ratelimits).
    admissions: dict[int, MemoryAdmission] = field(default_factory=dict)
    # Stream chunks: execution id -> stream id -> seq -> chunk (durableflow.engine.memory.streams).
    chunks: dict[str, dict[str, dict[int, Any]]] = field(default_factory=dict)


@dataclass(eq=False)
class _Lease:
    lost: bool = False


class MemoryCore:
    """Executions, the journal, leases and the sweep in memory (a part of ``InMemoryStorage``).

    Thread-safe: one re-entrant lock guards everything.
    """

    def __init__(self, clock: Callable[[], datetime] | None = None):
        self.clock = clock or ManualClock()
        self.tables = MemoryTables()
        self.lock = threading.RLock()
        # Task messages "sent" after commit, in order: (task, args, queue). A tester reads them.
        self.outbox: list[tuple[str, tuple, str]] = []
        # Per open transaction: its messages, and its after-commit hooks (callables) in order.
        self._pending: list[list[Any]] = []

    # Transactions, clock and outbox --------------------------------------------------

    @contextlib.contextmanager
    def atomic(self) -> Iterator[None]:
        with self.lock:
            saved = clone(self.tables)
            self._pending.append([])
            try:
                yield
            except BaseException:
                self.tables = saved
                self._pending.pop()
                raise
            messages = self._pending.pop()
            if self._pending:
                self._pending[-1].extend(messages)
            else:
                self._commit(messages)

    def _commit(self, messages: list[Any]) -> None:
        """The outermost transaction committed: send its messages, then call its ``after_commit`` hooks."""
        self.outbox.extend(message for message in messages if isinstance(message, tuple))
        for hook in messages:
            if callable(hook):
                hook()

    def now(self) -> datetime:
        return self.clock()

    def monotonic(self) -> float:
        return self.clock().timestamp()

    def enqueue(self, task: str, args: tuple, queue: str) -> bool:
        with self.lock:
            (self._pending[-1] if self._pending else self.outbox).append((task, tuple(args), queue))
        return True

    def enqueue_many(self, task: str, args_list: list[tuple], queue: str) -> bool:
        with self.lock:
            for args in args_list:
                self.enqueue(task, args, queue)
        return True

    def after_commit(self, fn: Callable[[], None]) -> None:
        with self.lock:
            if self._pending:
                self._pending[-1].append(fn)  # kept with the transaction's messages, dropped on rollback
                return
        fn()

    def _value(self, value: Any) -> Any:
        return self.clock() if value is NOW else clone(value)

    # Executions -----------------------------------------------------------------------

    def create_execution(self, values: dict[str, Any]) -> MemoryExecution | None:
        with self.lock:
            executions = self.tables.executions
            key = values.get("idempotency_key")
            if values["id"] in executions or (
                key is not None
                and any(e.workflow == values["workflow"] and e.idempotency_key == key for e in executions.values())
            ):
                return None
            execution = MemoryExecution(**{name: self._value(value) for name, value in values.items()})
            executions[execution.id] = execution
            self.tables.steps[execution.id] = {}
            return clone(execution)

    def create_and_enqueue(self, values: dict[str, Any], task: str, args: tuple, queue: str) -> MemoryExecution | None:
        with self.lock:
            execution = self.create_execution(values)
            if execution is not None:
                self.enqueue(task, args, queue)
            return execution

    def create_executions(self, values_list: list[dict[str, Any]]) -> list[MemoryExecution | None]:
        with self.lock:
            return [self.create_execution(values) for values in values_list]

    def get_execution(self, execution_id: str, fields: tuple[str, ...] | None = None) -> MemoryExecution | None:
        with self.lock:
            execution = self.tables.executions.get(execution_id)
            return clone(execution)

    def find_execution(self, workflow: str, idempotency_key: str) -> MemoryExecution | None:
        with self.lock:
            for execution in self.tables.executions.values():
                if execution.workflow == workflow and execution.idempotency_key == idempotency_key:
                    return clone(execution)
        return None

    def update_execution(
        self, execution_id: str, values: dict[str, Any], *, statuses: Iterable[str] | None = None, token: Any = ANY
    ) -> int:
        with self.lock:
            execution = self.tables.executions.get(execution_id)
            if execution is None or (statuses is not None and execution.status not in set(statuses)):
                return 0
            if token is not ANY and execution.lease_token != token:
                return 0
            self._set(execution, values)
            return 1

    def update_executions(
        self, ids: Iterable[str], values: dict[str, Any], *, statuses: Iterable[str] | None = None
    ) -> list[tuple[str, str]]:
        with self.lock:
            return [
                (pk, self.tables.executions[pk].queue)
                for pk in ids
                if self.update_execution(pk, values, statuses=statuses)
            ]

    def mark_executions(self, ids: Iterable[str], by_status: dict[str, dict[str, Any]]) -> list[tuple[str, str, str]]:
        changed = []
        with self.lock:
            for pk in ids:
                execution = self.tables.executions.get(pk)
                if execution is not None and execution.status in by_status:
                    status = execution.status
                    self._set(execution, by_status[status])
                    changed.append((pk, execution.queue, status))
        return changed

    def execution_ids(self, *, parent_id: str | None = None, statuses: Iterable[str] | None = None) -> list[str]:
        wanted = None if statuses is None else set(statuses)
        with self.lock:
            return [
                e.id
                for e in self.tables.executions.values()
                if (parent_id is None or e.parent_id == parent_id) and (wanted is None or e.status in wanted)
            ]

    def _prunable(self) -> set[str]:
        executions = self.tables.executions
        awaited = {
            w.target
            for w in self.tables.waiters.values()
            if w.kind == "child" and getattr(executions.get(w.execution_id), "status", None) not in TERMINAL
        }
        return {e.id for e in executions.values() if e.status in TERMINAL and e.id not in awaited}

    def prunable(self, before: datetime, limit: int) -> list[str]:
        with self.lock:
            candidates = self._prunable()
            executions = self.tables.executions.values()
            return [e.id for e in executions if e.id in candidates and e.finished_at and e.finished_at < before][:limit]

    def delete_finished(self, ids: list[str]) -> int:
        with self.lock:
            tables = self.tables
            gone = self._prunable() & set(ids)
            for pk in gone:
                del tables.executions[pk]
                tables.steps.pop(pk, None)
                tables.chunks.pop(pk, None)
            for execution in tables.executions.values():  # the parent link is set to null
                if execution.parent_id in gone:
                    execution.parent_id = None
            tables.waiters = {k: w for k, w in tables.waiters.items() if w.execution_id not in gone}
            tables.events = {k: e for k, e in tables.events.items() if e.execution_id not in gone}
            for watches in tables.effect_watches.values():
                for watch in [watch for watch in watches if watch[0] in gone]:
                    del watches[watch]
            tables.store_waiters = {k: w for k, w in tables.store_waiters.items() if k[0] not in gone}
            for admission in tables.admissions.values():  # kept, counted until its window ends
                if admission.execution_id in gone:
                    admission.execution_id = None
            return len(gone)

    def _set(self, execution: MemoryExecution, values: dict[str, Any]) -> None:
        unknown = set(values) - _EXECUTION_FIELDS
        if unknown:
            raise TypeError(f"unknown execution fields {sorted(unknown)}")
        for name, value in values.items():
            setattr(execution, name, self._value(value))

    # A delivery -------------------------------------------------------------------------

    def _claimable(self, execution: MemoryExecution, now: datetime, take_over: str | None = None) -> bool:
        return predicates.holds(predicates.CLAIMABLE, execution, now, {"take_over": take_over})

    def claimable_ids(self) -> list[str]:
        """Executions a delivery could claim now (the tester delivers these)."""
        now = self.clock()
        with self.lock:
            return [e.id for e in self.tables.executions.values() if self._claimable(e, now)]

    def claim(
        self,
        execution_id: str,
        token: str,
        lease_seconds: float,
        *,
        holder: str | None = None,
        take_over: str | None = None,
    ) -> ClaimRow | None:
        with self.lock:
            execution = self.tables.executions.get(execution_id)
            now = self.clock()
            if execution is None or not self._claimable(execution, now, take_over):
                return None
            execution.status = S.RUNNING
            # The previous delivery's lease still set: it died holding it.
            execution.lost_deliveries = 0 if execution.lease_token is None else execution.lost_deliveries + 1
            execution.lease_token = token
            execution.lease_expires_at = now + timedelta(seconds=lease_seconds)
            execution.lease_holder = holder
            execution.deliveries += 1
            execution.started_at = execution.started_at or now
            execution.wake_pending = False
            values = {name: clone(getattr(execution, name)) for name in predicates.CLAIM_FIELDS}
            return ClaimRow(values, clone(self.tables.steps[execution_id]), now)

    def keep_lease(self, execution_id: str, token: str, seconds: float) -> _Lease:
        # Nothing renews in memory: time moves only when a test moves the clock.
        return _Lease()

    def release_lease(self, handle: LeaseHandle) -> None:
        pass

    def holds_lease(self, execution_id: str, token: str) -> bool:
        with self.lock:
            execution = self.tables.executions.get(execution_id)
            return execution is not None and execution.lease_token == token

    def insert_step(self, execution_id: str, token: str, record: StepRecordData) -> bool:
        with self.lock:
            if not self.holds_lease(execution_id, token):
                return False
            steps = self.tables.steps[execution_id]
            if record.key in steps:
                return False
            steps[record.key] = clone(record)
            return True

    def update_step(
        self,
        execution_id: str,
        key: str,
        values: dict[str, Any],
        *,
        token: Any = ANY,
        statuses: Iterable[str] | None = None,
    ) -> int:
        with self.lock:
            if token is not ANY and not self.holds_lease(execution_id, token):
                return 0
            record = self.tables.steps.get(execution_id, {}).get(key)
            if record is None or (statuses is not None and record.status not in set(statuses)):
                return 0
            for name, value in values.items():
                if name not in RECORD_FIELDS:
                    raise TypeError(f"unknown step field {name!r}")
                setattr(record, name, self._value(value))
            return 1

    def insert_steps(self, execution_id: str, token: str, records: list[StepRecordData]) -> bool:
        with self.lock:
            steps = self.tables.steps.get(execution_id, {})
            if not self.holds_lease(execution_id, token) or any(record.key in steps for record in records):
                return False
            for record in records:
                steps[record.key] = clone(record)
            return True

    def record_outcome(
        self, execution_id: str, token: str, values: dict[str, Any], *, if_woken: dict[str, Any] | None = None
    ) -> OutcomeRow | None:
        with self.lock:
            execution = self.tables.executions.get(execution_id)
            if execution is None or execution.lease_token != token:
                return None
            woken = if_woken is not None and execution.wake_pending
            self._set(execution, if_woken if if_woken is not None and woken else values)
            return OutcomeRow(watched=execution.watched, woken=woken)

    def get_step(self, execution_id: str, key: str) -> StepRecordData | None:
        with self.lock:
            return clone(self.tables.steps.get(execution_id, {}).get(key))

    def steps(self, execution_id: str) -> list[StepRecordData]:
        with self.lock:
            return clone(list(self.tables.steps.get(execution_id, {}).values()))

    def complete_steps(
        self, pairs: Iterable[tuple[str, str]], values: dict[str, Any], *, kind: str, statuses: Iterable[str]
    ) -> int:
        wanted = set(statuses)
        count = 0
        with self.lock:
            for execution_id, key in pairs:
                record = self.tables.steps.get(execution_id, {}).get(key)
                if record is not None and record.kind == kind and record.status in wanted:
                    count += self.update_step(execution_id, key, values)
        return count

    # The sweep --------------------------------------------------------------------------

    def lock_due(self, limit: int) -> list[tuple[str, str, dict[str, Any] | None]]:
        now = self.clock()
        with self.lock:
            due = sorted(
                (e for e in self.tables.executions.values() if predicates.holds(predicates.DUE, e, now)),
                key=attrgetter("wake_at"),
            )
            return [(e.id, e.queue, clone(e.waiting_for)) for e in due[:limit]]

    def lock_stale(self, redeliver_after: float, limit: int) -> list[tuple[str, str]]:
        now, after = self.clock(), {"redeliver_after": redeliver_after}
        with self.lock:
            stale = sorted(
                (e for e in self.tables.executions.values() if predicates.holds(predicates.STALE, e, now, after)),
                key=attrgetter("enqueued_at"),
            )
            return [(e.id, e.queue) for e in stale[:limit]]

    def lock_overdue(self, limit: int) -> list[tuple[str, datetime]]:
        now = self.clock()
        with self.lock:
            overdue = sorted(
                (e for e in self.tables.executions.values() if predicates.holds(predicates.OVERDUE, e, now)),
                key=attrgetter("deadline_at"),
            )
            return [(e.id, cast(datetime, e.deadline_at)) for e in overdue[:limit]]  # OVERDUE: set

    def leased_on(self, host: str, limit: int) -> list[tuple[str, str, str, str]]:
        now = self.clock()
        with self.lock:
            return [
                (e.id, e.queue, cast(str, e.lease_token), e.lease_holder)  # LEASE_LIVE: a token is held
                for e in self.tables.executions.values()
                if predicates.holds(predicates.LEASE_LIVE, e, now)
                and e.lease_holder is not None
                and e.lease_holder.startswith(f"{host} ")
            ][:limit]
