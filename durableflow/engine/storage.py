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
    ``enqueue_many(task, args_list, queue)``
                                         the same for several messages, sent together (one broker connection)
    ``after_commit(fn)``                 call ``fn`` (no arguments) once the current transaction commits (at
                                         once outside one), never if it rolls back (``durableflow.engine.observing``)

Executions
    ``create_execution(fields)``         insert; ``None`` if its id or (workflow, idempotency key) is taken,
                                         without breaking the caller's transaction
    ``create_and_enqueue(fields, task, args, queue)``
                                         ``create_execution``, then ``enqueue`` for the new row; the message
                                         may leave before the row is committed, and even when nothing was
                                         inserted (callers give a fresh id): its delivery may find no row yet
    ``early_deliveries``                 whether a delivery may arrive before its row (a property)
    ``create_executions(fields_list)``   insert many (each dict with the same fields) in one statement where
                                         possible: a list in the same order, ``None`` where the id or key is taken
    ``get_execution(id, fields=None)``   the row, or ``None``; ``fields`` names the only columns the caller
                                         reads (a storage may fill in more)
    ``find_execution(workflow, idempotency_key)``
    ``update_execution(id, fields, *, statuses=None, token=ANY)``
                                         conditional update: only while the status is in ``statuses`` and
                                         (unless ``ANY``) the lease token equals ``token``; returns the count
    ``update_executions(ids, fields, *, statuses=None)``
                                         the same for many (locked, then changed): the (id, queue) of those changed
    ``mark_executions(ids, by_status)``  lock those of ``ids`` whose status is a key of ``by_status``, then give
                                         each the fields of its status: the (id, queue, status) of those changed
    ``execution_ids(*, parent_id=None, statuses=None)``
    ``prunable(before, limit)``          ids of finished executions that ended before ``before`` (a datetime)
                                         and that no unfinished execution waits for (a child waiter), at most
                                         ``limit``
    ``delete_finished(ids)``             lock those of ``ids`` still prunable (as above, whenever they ended), then
                                         delete them with their journal, waiters, signals, stream chunks, effect
                                         and store watches (their rate-limit admissions stay, unlinked, until
                                         ``drop_spent_admissions``): how many were deleted

A delivery (leases and the journal)
    ``claim(id, token, lease_seconds, *, holder=None, take_over=None)``
                                         compare-and-set the lease if the execution is claimable (status and
                                         due time judged by the storage's clock) and its lease is free
                                         (``records.lease_free``: none, expired, or the token ``take_over``),
                                         recording ``holder``: a ``ClaimRow``, or None
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
    ``insert_steps(id, token, records)`` fenced insert of several new records at once; returns whether it was done
    ``record_outcome(id, token, fields, *, if_woken=None)``
                                         the delivery's fenced outcome; with ``if_woken``, those fields instead
                                         when a wake-up arrived while the lease was held (``wake_pending``):
                                         an ``OutcomeRow`` (``.watched``, ``.woken``), or None if the lease is gone

Waits (events, signals, tokens, children)
    ``add_waiter(fields)``               insert a waiter; the existing one if its (execution, key) is taken
    ``get_waiter(id, key)``              the waiter of that step, or None
    ``open_waiters(kind, target, *, execution_id=None, payload=ANY)``
                                         open waiters, oldest first; with ``payload``, a storage may leave out
                                         those whose ``match`` that payload does not contain
    ``update_waiter(waiter_id, fields, *, statuses)``
                                         conditional on the waiter's status; a count
    ``add_event(fields)``                insert an event (or signal, or token completion); None if its
                                         (kind, event_id) is taken
    ``get_event(pk)``
    ``events_for(waiter, *, after, limit)``
                                         events that could satisfy ``waiter``, in publication order (id > after),
                                         leaving out those its execution consumed; events of a type only if
                                         published since the execution was created. A storage may leave out
                                         those whose payload does not contain ``match``; the caller checks.
    ``take_event(waiter_id, event_pk)``  satisfy the open waiter with the event: ``TAKEN``, ``CLOSED`` (not open
                                         any more) or ``CONSUMED`` (its execution consumed that event already)
    ``watch_execution(id)``              mark the execution as waited for, then return it (None if unknown)
    ``watchers(id)``                     ids of the executions with an open child waiter on ``id``
    ``stranded_waiters(limit)``          ids of waiting executions with an open child waiter on one that ended
                                         (the wake-up after its outcome was lost: a crash, say)
    ``end_waits(id, fields)``            close the execution's open waiters (expired) and give its unfinished
                                         items ``fields``: it ended (cancelled) and nothing may satisfy them

Sagas and metadata (``durableflow.engine.sagas``, ``durableflow.engine.metadata``, ``durableflow.engine.lineage``)
    ``lock_metadata(id)``                the execution's metadata, its row locked until the transaction ends (a
                                         row lock where the database has them; SQLite's IMMEDIATE transactions
                                         serialise writers); None if there is no such execution
    ``add_steps(id, records)``           insert records into the journal of an execution no delivery has claimed
                                         yet (a fork's copy of its origin's journal), unfenced

Step bodies as their own tasks (map items, run(queue=))
    ``claim_item(id, key, lease_seconds)``
                                         start an attempt of a waiting item (or of a running one whose attempt is
                                         older than the lease) of an unfinished execution: ``(attempt, meta)``
    ``finish_item(id, key, attempt, fields)``
                                         record the attempt's outcome, only if it is still the item's attempt
    ``send_next_item(id)``               mark the earliest item not sent yet as sent: its (key, queue), or None
    ``items_left(id)``                   how many items of the execution are not finished
    ``lock_stale_items(resend_after, limit)``
                                         items of unfinished executions sent or started longer ago than
                                         ``resend_after`` seconds and not finished, marked as sent again:
                                         (id, key, queue)

Transactional steps
    ``transaction_scope()``              one transaction on the journal's database for a transactional step's
                                         body and its fenced record: yields a ``transactions.Scope``; commits
                                         on a clean exit; if the block raises, rolls everything back, runs the
                                         scope's rollback hooks and re-raises. Meanwhile a query through any
                                         other database alias is refused (``TRANSACTION_WRONG_ALIAS``)
    ``is_transient(exc)``                whether an error raised in a scope calls for running it again
                                         (serialization failure, deadlock, a busy database)

Faults (``durableflow.engine.faults``)
    ``is_fault(exc)``                    whether an error raised by one of these methods is the database's
                                         failure (a lost connection, a timeout, a busy database...), not a
                                         refusal of the values written: a delivery that meets one ends without
                                         an outcome and is delivered again
    ``reset()``                          after a fault: drop the connection (the next call opens a new one);
                                         nothing inside a transaction
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

Rate limits (``durableflow.engine.ratelimits``)
    ``admit(key, limit, window, units, execution_id, step_key, token)``
                                         one transaction that serialises the requests of ``key``: while ``token``
                                         holds the execution's lease, the step's admission if it has one (``(True,
                                         admitted_at)``); else, if ``units`` fit after the key's admissions of the
                                         last ``window`` seconds and its older requests still waiting
                                         (``ratelimits.admission_time``, the storage's clock), the admission,
                                         recorded: ``(True, now)``; else the request, kept in its place, and
                                         ``(False, when it would fit)``. None if the lease is not held
    ``drop_spent_admissions(limit)``     delete admissions out of their window and requests never admitted,
                                         of executions finished or gone; a count

The sweep
    ``lock_due(limit)``                  waiting executions whose ``wake_at`` passed, locked for the current
                                         transaction (skipping rows another sweep holds): (id, queue, waiting_for)
    ``lock_stale(redeliver_after, limit)``
                                         runnable executions nobody is on (lease free or expired) whose last
                                         wake-up is older than ``redeliver_after`` seconds: (id, queue)
    ``leased_on(host, limit)``           running executions under an unexpired lease whose holder is on
                                         ``host`` (``holders.Holder.host``): (id, queue, token, holder)
    ``lock_overdue(limit)``              unfinished executions whose ``deadline_at`` passed and that no cancel
                                         was asked of yet, earliest deadline first, locked as ``lock_due``'s:
                                         (id, deadline_at)

Concurrency keys (``durableflow.engine.concurrency``; a run's ``concurrency_key`` and ``concurrency_ticket``)
    ``lock_slots(workflow, key)``        serialise the slot decisions of (workflow, key) until the current
                                         transaction ends (an advisory lock where the database has one; SQLite's
                                         IMMEDIATE transactions serialise writers)
    ``slots(workflow, key)``             over the unfinished runs of that key: (holders: those without a ticket,
                                         queued: those with one, the highest ticket or 0)
    ``queued_runs(workflow, key, limit)``
                                         the unfinished queued runs of that key, lowest ticket first: (id, queue)
    ``queued_keys(limit)``               distinct (workflow, key) that have unfinished queued runs

Streams (``durableflow.engine.streams``; chunk rows with ``.seq``, ``.chunk``, ``.at``)
    ``write_chunk(id, token, stream_id, seq, chunk, at)``
                                         one fenced write: inserted only while ``token`` holds the lease and
                                         (execution, stream_id, seq) is not stored yet; whether it was inserted
    ``last_chunk(id, stream_id)``        the highest seq stored of that stream (0: none)
    ``chunks(id, stream_id, after, limit)``
                                         the stream's chunks with seq > ``after``, in order, at most ``limit``
    ``stream_ids(id)``                   the execution's streams: ``{stream_id: highest seq}``

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
from typing import Any, Callable, Iterable, Protocol

from durableflow.engine.records import StepRecordData
from durableflow.engine.transactions import Scope

__all__ = ["NOW", "ANY", "TAKEN", "CLOSED", "CONSUMED", "ClaimRow", "OutcomeRow", "LeaseHandle", "Storage"]


class _Sentinel:
    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return self.name


NOW: Any = _Sentinel("NOW")  # a field value: the storage's clock at the write
ANY: Any = _Sentinel("ANY")  # a condition that matches every value

# What ``take_event`` did.
TAKEN = "taken"
CLOSED = "closed"
CONSUMED = "consumed"


@dataclass
class ClaimRow:
    """What a claim returns: the execution's fields, its journal by key, and the clock."""

    execution: dict[str, Any]
    records: dict[str, StepRecordData]
    now: datetime


@dataclass
class OutcomeRow:
    """What recording a delivery's outcome found on the row."""

    watched: bool  # a wait is registered on this execution's end
    woken: bool = False  # a wake-up arrived meanwhile: the ``if_woken`` fields were written


class LeaseHandle(Protocol):
    lost: bool


class Storage(Protocol):
    # Transactions, clock and outbox
    def atomic(self) -> AbstractContextManager[Any]: ...
    def now(self) -> datetime: ...
    def monotonic(self) -> float: ...
    def enqueue(self, task: str, args: tuple, queue: str) -> bool: ...
    def enqueue_many(self, task: str, args_list: list[tuple], queue: str) -> bool: ...
    def after_commit(self, fn: Callable[[], None]) -> None: ...

    # Executions
    def create_execution(self, fields: dict[str, Any]) -> Any | None: ...
    def create_and_enqueue(self, fields: dict[str, Any], task: str, args: tuple, queue: str) -> Any | None: ...
    @property
    def early_deliveries(self) -> bool: ...
    def create_executions(self, fields_list: list[dict[str, Any]]) -> list[Any | None]: ...
    def get_execution(self, execution_id: str, fields: tuple[str, ...] | None = None) -> Any | None: ...
    def find_execution(self, workflow: str, idempotency_key: str) -> Any | None: ...
    def update_execution(
        self, execution_id: str, fields: dict[str, Any], *, statuses: Iterable[str] | None = None, token: Any = ANY
    ) -> int: ...
    def update_executions(
        self, ids: Iterable[str], fields: dict[str, Any], *, statuses: Iterable[str] | None = None
    ) -> int: ...
    def mark_executions(
        self, ids: Iterable[str], by_status: dict[str, dict[str, Any]]
    ) -> list[tuple[str, str, str]]: ...
    def execution_ids(self, *, parent_id: str | None = None, statuses: Iterable[str] | None = None) -> list[str]: ...
    def prunable(self, before: datetime, limit: int) -> list[str]: ...
    def delete_finished(self, ids: list[str]) -> int: ...

    # A delivery
    def claim(
        self,
        execution_id: str,
        token: str,
        lease_seconds: float,
        *,
        holder: str | None = None,
        take_over: str | None = None,
    ) -> ClaimRow | None: ...
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
    def insert_steps(self, execution_id: str, token: str, records: list[StepRecordData]) -> bool: ...
    def record_outcome(
        self, execution_id: str, token: str, fields: dict[str, Any], *, if_woken: dict[str, Any] | None = None
    ) -> OutcomeRow | None: ...

    # Waits
    def add_waiter(self, fields: dict[str, Any]) -> Any: ...
    def get_waiter(self, execution_id: str, key: str) -> Any | None: ...
    def open_waiters(
        self, kind: str, target: str, *, execution_id: str | None = None, payload: Any = ANY
    ) -> list[Any]: ...
    def update_waiter(self, waiter_id: int, fields: dict[str, Any], *, statuses: Iterable[str]) -> int: ...
    def add_event(self, fields: dict[str, Any]) -> Any | None: ...
    def get_event(self, pk: int) -> Any | None: ...
    def events_for(self, waiter: Any, *, after: int, limit: int) -> list[Any]: ...
    def take_event(self, waiter_id: int, event_pk: int) -> str: ...
    def watch_execution(self, execution_id: str) -> Any | None: ...
    def watchers(self, execution_id: str) -> list[str]: ...
    def stranded_waiters(self, limit: int) -> list[str]: ...
    def end_waits(self, execution_id: str, fields: dict[str, Any]) -> None: ...

    # Sagas and metadata
    def lock_metadata(self, execution_id: str) -> dict[str, Any] | None: ...
    def add_steps(self, execution_id: str, records: list[StepRecordData]) -> None: ...

    # Step bodies as their own tasks
    def claim_item(self, execution_id: str, key: str, lease_seconds: float) -> tuple[int, dict[str, Any]] | None: ...
    def finish_item(self, execution_id: str, key: str, attempt: int, fields: dict[str, Any]) -> bool: ...
    def send_next_item(self, execution_id: str) -> tuple[str, str] | None: ...
    def items_left(self, execution_id: str) -> int: ...
    def lock_stale_items(self, resend_after: float, limit: int) -> list[tuple[str, str, str]]: ...

    # Transactional steps
    def transaction_scope(self) -> AbstractContextManager[Scope]: ...
    def is_transient(self, exc: BaseException) -> bool: ...

    # Faults
    def is_fault(self, exc: BaseException) -> bool: ...
    def reset(self) -> None: ...

    # Effects
    def create_effect(self, fields: dict[str, Any]) -> bool: ...
    def get_effect(self, effect_id: str) -> Any | None: ...
    def update_effect(
        self, effect_id: str, fields: dict[str, Any], *, statuses: Iterable[str] | None = None, holder_token: Any = ANY
    ) -> int: ...
    def hold_effect(self, effect_id: str, execution_id: str, token: str) -> int: ...
    def add_effect_watch(self, effect_id: str, execution_id: str, step_key: str) -> None: ...
    def pop_effect_watches(self, effect_id: str) -> list[str]: ...

    # Rate limits
    def admit(
        self, key: str, limit: int, window: float, units: int, execution_id: str, step_key: str, token: str
    ) -> tuple[bool, datetime] | None: ...
    def drop_spent_admissions(self, limit: int) -> int: ...

    # The sweep
    def lock_due(self, limit: int) -> list[tuple[str, str, dict[str, Any] | None]]: ...
    def lock_stale(self, redeliver_after: float, limit: int) -> list[tuple[str, str]]: ...
    def leased_on(self, host: str, limit: int) -> list[tuple[str, str, str, str]]: ...
    def lock_overdue(self, limit: int) -> list[tuple[str, datetime]]: ...

    # Concurrency keys
    def lock_slots(self, workflow: str, key: str) -> None: ...
    def slots(self, workflow: str, key: str) -> tuple[int, int, int]: ...
    def queued_runs(self, workflow: str, key: str, limit: int) -> list[tuple[str, str]]: ...
    def queued_keys(self, limit: int) -> list[tuple[str, str]]: ...

    # Streams
    def write_chunk(
        self, execution_id: str, token: str, stream_id: str, seq: int, chunk: Any, at: datetime
    ) -> bool: ...
    def last_chunk(self, execution_id: str, stream_id: str) -> int: ...
    def chunks(self, execution_id: str, stream_id: str, after: int, limit: int) -> list[Any]: ...
    def stream_ids(self, execution_id: str) -> dict[str, int]: ...

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
