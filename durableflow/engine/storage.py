"""The storage protocol: the reads and conditional writes that the verbs are written over.

The verbs (``durableflow.engine.verbs``) and a delivery's ``Journal`` decide what changes;
a storage only keeps rows and answers whether a conditional write matched. Two storages
implement exactly this protocol and are held to one contract suite: the ORM one
(``durableflow.orm.OrmStorage``, in the project's database, honouring its routers) and the
in-memory one (``durableflow.engine.memory.InMemoryStorage``, for tests).

Rows are returned as objects with attributes (the ORM storage returns model instances, the
in-memory one dataclasses); ``fields`` passed in are plain values, or ``NOW`` for the
storage's clock at the write. Every method below is the whole protocol:

Transactions, clock and outbox
    ``atomic()``                         a transaction (a savepoint when nested); rolls back on error
    ``now()``                            the storage's clock (the database's, where there is one)
    ``monotonic()``                      seconds on a clock that ``now()`` moves with (for a delivery's clock)
    ``enqueue(task, args, queue)``       send a task message once the current transaction commits
                                         (at once outside one); returns whether it was sent

Executions
    ``create_execution(fields)``         insert; ``None`` if its id or (workflow, idempotency key) is taken,
                                         without breaking the caller's transaction
    ``get_execution(id)``                the row, or ``None``
    ``find_execution(workflow, idempotency_key)``
    ``update_execution(id, fields, *, statuses=None, token=ANY)``
                                         conditional update: only while the status is in ``statuses`` and
                                         (unless ``ANY``) the lease token equals ``token``; returns the count
    ``update_executions(ids, fields, *, statuses=None)``
                                         the same for many (locked, then changed): the (id, queue) of those changed
    ``execution_ids(*, parent_id=None, statuses=None)``

A delivery (leases and the journal)
    ``claim(id, token, lease_seconds)``  compare-and-set the lease if the execution is claimable (status
                                         and due time judged by the storage's clock): a ``ClaimRow``, or None
    ``keep_lease(id, token, seconds)``   keep renewing the lease while steps run: a handle with ``.lost``
    ``release_lease(handle)``
    ``holds_lease(id, token)``
    ``insert_step(id, token, record)``   one fenced write: inserted only while ``token`` holds the lease and
                                         the key is not recorded yet; returns whether it was inserted
    ``update_step(id, key, fields, *, token=ANY, statuses=None)``
                                         fenced (``token``) or conditional on the step's status; a count
    ``get_step(id, key)``                a ``StepRecordData`` or None
    ``steps(id)``                        the journal in order, as ``StepRecordData``
    ``complete_steps(pairs, fields, *, kind, statuses)``
                                         update the steps named by exact (execution id, key) pairs

Transactional steps
    ``transaction_scope()``              one transaction on the journal's database for a transactional step's
                                         body and its fenced record: yields a ``transactions.Scope``; commits
                                         on a clean exit; if the block raises, rolls everything back, runs the
                                         scope's rollback hooks and re-raises. Meanwhile a query through any
                                         other database alias is refused (``TRANSACTION_WRONG_ALIAS``)
    ``is_transient(exc)``                whether an error raised in a scope calls for running it again
                                         (serialization failure, deadlock, a busy database)
Effects (``durableflow.engine.effects``)
    ``create_effect(fields)``            insert a pending effect; whether it was inserted (False: its id is
                                         taken; the caller's transaction goes on unharmed)
    ``get_effect(effect_id)``            the row, or ``None``
    ``update_effect(effect_id, fields, *, statuses=None, holder_token=ANY)``
                                         conditional update: only while the status is in ``statuses`` and
                                         (unless ``ANY``) the holder's token equals ``holder_token``; a count
    ``hold_effect(effect_id, execution_id, token)``
                                         one fenced write: while the effect is pending, ``token`` holds the
                                         execution's lease (unexpired, by the storage's clock) and the effect
                                         is not held by another live lease (its holder's token is gone or
                                         expired), make this delivery its holder and count an attempt; a count
    ``add_effect_watch(effect_id, execution_id, step_key)``
                                         once per (effect, execution, step); a repeat changes nothing
    ``pop_effect_watches(effect_id)``    delete the effect's watches; the ids of the executions that had them

The sweep
    ``lock_due(limit)``                  waiting executions whose ``wake_at`` passed, locked for the current
                                         transaction (skipping rows another sweep holds): (id, queue, waiting_for)
    ``lock_stale(redeliver_after, limit)``
                                         runnable executions nobody is on (lease free or expired) whose last
                                         wake-up is older than ``redeliver_after`` seconds: (id, queue)

Stores (rows with ``.name``, ``.store_id``, ``.instance_id``, ``.version``, ``.state``, ``.has_waiters``)
    ``get_store(name, store_id)``        the store, or None
    ``lock_store(name, store_id)``       the same, locked until the transaction ends (a row lock where the
                                         database has them; SQLite's IMMEDIATE transactions serialise writers)
    ``create_store(fields)``             insert unless (name, store_id) exists, without breaking the caller's
                                         transaction
    ``write_store(name, store_id, fields, *, instance_id, version)``
                                         compare-and-set: change the store only at that instance and version;
                                         a count
    ``delete_store(name, store_id, *, instance_id, version)``
                                         the same, deleting it
    ``get_applied(execution_id, key)``   the ledger entry of a step that changed a store (``.outcome``), or None
    ``record_applied(fields, *, token)`` insert a ledger entry, fenced: only while ``token`` holds the lease
                                         of ``fields["execution_id"]`` and the step has no entry yet; whether
                                         it was inserted
    ``store_waiters(name, store_id)``    the store's waiters not woken yet (``.id``, ``.execution_id``, ``.key``,
                                         ``.instance_id``, ``.version``, ``.reads``)
    ``put_store_waiter(fields)``         insert the waiter of (execution_id, key), replacing any earlier one
    ``delete_store_waiter(execution_id, key)``
    ``wake_store_waiters(ids)``          mark waiters woken (``woken_at``)
    ``woken_waiter_executions(statuses, limit)``
                                         ids of executions in ``statuses`` that wait for a store
                                         (``waiting_for["kind"] == "store"``) and have a woken waiter
    ``drop_woken_waiters(statuses)``     delete woken waiters of executions in ``statuses``; a count
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Iterable, Protocol

from durableflow.engine.records import StepRecordData
from durableflow.engine.transactions import Scope

__all__ = ["NOW", "ANY", "ClaimRow", "LeaseHandle", "Storage"]


class _Sentinel:
    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return self.name


NOW: Any = _Sentinel("NOW")  # a field value: the storage's clock at the write
ANY: Any = _Sentinel("ANY")  # a condition that matches every value


@dataclass
class ClaimRow:
    """What a claim returns: the execution's fields, its journal by key, and the clock."""

    execution: dict[str, Any]
    records: dict[str, StepRecordData]
    now: datetime


class LeaseHandle(Protocol):
    lost: bool


class Storage(Protocol):
    # Transactions, clock and outbox
    def atomic(self) -> AbstractContextManager[Any]: ...
    def now(self) -> datetime: ...
    def monotonic(self) -> float: ...
    def enqueue(self, task: str, args: tuple, queue: str) -> bool: ...

    # Executions
    def create_execution(self, fields: dict[str, Any]) -> Any | None: ...
    def get_execution(self, execution_id: str) -> Any | None: ...
    def find_execution(self, workflow: str, idempotency_key: str) -> Any | None: ...
    def update_execution(
        self, execution_id: str, fields: dict[str, Any], *, statuses: Iterable[str] | None = None, token: Any = ANY
    ) -> int: ...
    def update_executions(
        self, ids: Iterable[str], fields: dict[str, Any], *, statuses: Iterable[str] | None = None
    ) -> int: ...
    def execution_ids(self, *, parent_id: str | None = None, statuses: Iterable[str] | None = None) -> list[str]: ...

    # A delivery
    def claim(self, execution_id: str, token: str, lease_seconds: float) -> ClaimRow | None: ...
    def keep_lease(self, execution_id: str, token: str, seconds: float) -> LeaseHandle: ...
    def release_lease(self, handle: LeaseHandle) -> None: ...
    def holds_lease(self, execution_id: str, token: str) -> bool: ...
    def insert_step(self, execution_id: str, token: str, record: StepRecordData) -> bool: ...
    def update_step(
        self,
        execution_id: str,
        key: str,
        fields: dict[str, Any],
        *,
        token: Any = ANY,
        statuses: Iterable[str] | None = None,
    ) -> int: ...
    def get_step(self, execution_id: str, key: str) -> StepRecordData | None: ...
    def steps(self, execution_id: str) -> list[StepRecordData]: ...
    def complete_steps(
        self, pairs: Iterable[tuple[str, str]], fields: dict[str, Any], *, kind: str, statuses: Iterable[str]
    ) -> int: ...

    # Transactional steps
    def transaction_scope(self) -> AbstractContextManager[Scope]: ...
    def is_transient(self, exc: BaseException) -> bool: ...
    # Effects
    def create_effect(self, fields: dict[str, Any]) -> bool: ...
    def get_effect(self, effect_id: str) -> Any | None: ...
    def update_effect(
        self, effect_id: str, fields: dict[str, Any], *, statuses: Iterable[str] | None = None, holder_token: Any = ANY
    ) -> int: ...
    def hold_effect(self, effect_id: str, execution_id: str, token: str) -> int: ...
    def add_effect_watch(self, effect_id: str, execution_id: str, step_key: str) -> None: ...
    def pop_effect_watches(self, effect_id: str) -> list[str]: ...

    # The sweep
    def lock_due(self, limit: int) -> list[tuple[str, str, dict[str, Any] | None]]: ...
    def lock_stale(self, redeliver_after: float, limit: int) -> list[tuple[str, str]]: ...

    # Stores
    def get_store(self, name: str, store_id: str) -> Any | None: ...
    def lock_store(self, name: str, store_id: str) -> Any | None: ...
    def create_store(self, fields: dict[str, Any]) -> None: ...
    def write_store(
        self, name: str, store_id: str, fields: dict[str, Any], *, instance_id: str, version: int
    ) -> int: ...
    def delete_store(self, name: str, store_id: str, *, instance_id: str, version: int) -> int: ...
    def get_applied(self, execution_id: str, key: str) -> Any | None: ...
    def record_applied(self, fields: dict[str, Any], *, token: str) -> bool: ...
    def store_waiters(self, name: str, store_id: str) -> list[Any]: ...
    def put_store_waiter(self, fields: dict[str, Any]) -> None: ...
    def delete_store_waiter(self, execution_id: str, key: str) -> int: ...
    def wake_store_waiters(self, ids: Iterable[int]) -> int: ...
    def woken_waiter_executions(self, statuses: Iterable[str], limit: int) -> list[str]: ...
    def drop_woken_waiters(self, statuses: Iterable[str]) -> int: ...
