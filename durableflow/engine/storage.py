"""The storage protocol: the reads and conditional writes that the verbs are written over.

The verbs (``durableflow.engine.verbs``) and a delivery's ``Journal`` decide what changes;
a storage only keeps rows and answers whether a conditional write matched. Two storages
implement exactly this protocol and are held to one contract suite: the ORM one
(``durableflow.orm.OrmStorage``, in the project's database, honouring its routers) and the
in-memory one (``durableflow.engine.memory.InMemoryStorage``, for tests). Each method's own
docstring is its contract; what holds for all of them:

Rows
    Rows are returned as objects with attributes, typed by the protocols of
    ``durableflow.engine.rows`` (the ORM storage returns model instances, the in-memory one
    dataclasses). A row is a snapshot: only the storage's writes change what is stored.

Fields
    ``fields`` passed in are plain values (JSON values, datetimes, ids), or ``NOW`` for the
    storage's clock at the write. A condition given as ``ANY`` matches every value.

Conditional writes and fencing
    Every write that a concurrent writer could race is conditional: its condition (a status
    in ``statuses``, the lease ``token``, an instance and version) is part of the one statement
    that writes, so two writers racing for a row cannot both match. The answer says what
    matched: a count, a boolean, or the rows changed. A write *fenced* by ``token`` happens only
    while that token holds the execution's lease: a delivery that lost its lease writes nothing.

Transactions and locks
    Inside ``atomic()`` the methods share its transaction: a conflict that a method reports in
    its answer (a taken id, say) never breaks the caller's transaction; an exception rolls the
    whole block back. ``lock_*`` methods serialise what they return until the current
    transaction ends (a row or advisory lock where the database has them; SQLite's IMMEDIATE
    transactions serialise writers); the sweep's (``lock_due``, ``lock_stale``,
    ``lock_overdue``, ``lock_stale_items``) skip rows another sweep holds.

Clocks
    Due times, leases and deadlines are judged by the storage's clock (``now()``: the database's,
    where there is one), never by the worker's, so that workers whose clocks drift agree.

Failures
    An exception that ``is_fault`` recognises is the database failing (the delivery ends without
    an outcome and is delivered again); any other is a refusal of what was written.
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Callable, Iterable, Protocol, Sequence

from durableflow.engine.records import StepRecordData
from durableflow.engine.rows import (
    AppliedRow,
    EffectRow,
    EventRow,
    ExecutionRow,
    StoreRow,
    StoreWaiterRow,
    WaiterRow,
)
from durableflow.engine.transactions import Scope

__all__ = [
    "NOW",
    "ANY",
    "TAKEN",
    "CLOSED",
    "CONSUMED",
    "LEFT",
    "ClaimRow",
    "OutcomeRow",
    "Owner",
    "Satisfaction",
    "Satisfied",
    "ItemRecorded",
    "LeaseHandle",
    "Storage",
]


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

# The meta key of a fanned-out step's record (a map, a ``run(queue=)`` attempt) that counts its
# items not finished yet: set by the delivery that fans out, counted down by ``record_item``.
LEFT = "left"


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


@dataclass(frozen=True)
class Owner:
    """How ``satisfy_waits`` names the execution an event belongs to (a signal's addressee, a
    token's owner): the execution of the earliest open waiter of the event's (kind, name) if
    ``waiting``; else the first of ``candidates`` (execution id, step key) whose execution's status
    is in ``statuses`` and that has no waiter at that key (a key of ``None``: any). Without one,
    nothing is stored."""

    candidates: tuple[tuple[str, str | None], ...] = ()
    statuses: frozenset[str] = frozenset()
    waiting: bool = False
    addressed: bool = False  # only the owner's waiters may take the event (signals)


@dataclass(frozen=True)
class Satisfaction:
    """What ``satisfy_waits`` is asked to do (see its contract)."""

    kind: str  # the waiters' kind: event, signal, token or child
    target: str  # their target: the event type, signal name, token, or the execution waited for
    lock: str  # the ``lock_waits`` key the registrars of those waiters take
    settle: dict[str, Any]  # the fields of a settled step record (its ``meta`` is merged into the record's)
    moves: dict[str, dict[str, Any]]  # the woken executions' fields by status, as ``mark_executions``
    event: dict[str, Any] | None = None  # the event to store first (its fields), or None (a child's end)
    owner: Owner | None = None  # how the event's execution is named (None: the event has none)
    payload: Any = None  # what the waiters' ``match`` must be contained in (events)


@dataclass
class Satisfied:
    """What ``satisfy_waits`` did."""

    repeat: bool = False  # the event's (kind, event_id) was taken: nothing was stored or satisfied
    owner: str | None = None  # the event's execution, as ``Owner`` named it
    event: int | None = None  # the stored event's id
    taken: int = 0  # the waiters satisfied
    moved: list[tuple[str, str, str]] = field(default_factory=list)  # as ``mark_executions``: (id, queue, status)
    unsure: bool = False  # open waiters whose ``match`` the storage could not judge were left open


@dataclass
class ItemRecorded:
    """What recording an item's outcome did (``record_item``)."""

    left: int | None  # its step's items still unfinished; None: the step keeps no count (``LEFT``)
    woken: tuple[str, str] | None = None  # the last item: (queue, status it had) of the execution marked


class LeaseHandle(Protocol):
    """A lease kept renewed while steps run (``Storage.keep_lease``)."""

    lost: bool  # the renewal found the lease gone: another delivery holds the execution


class Storage(Protocol):
    # Transactions, clock and outbox -------------------------------------------------------

    def atomic(self) -> AbstractContextManager[Any]:
        """A transaction (a savepoint when nested); rolls back if the block raises."""

    def now(self) -> datetime:
        """The storage's clock (the database's, where there is one)."""

    def monotonic(self) -> float:
        """Seconds on a clock that ``now()`` moves with (for a delivery's clock)."""

    def enqueue(self, task: str, args: tuple, queue: str) -> bool:
        """Send a task message once the current transaction commits (at once outside one);
        returns whether it was sent."""

    def enqueue_many(self, task: str, args_list: list[tuple], queue: str) -> bool:
        """``enqueue`` for several messages, sent together (one broker connection)."""

    def after_commit(self, fn: Callable[[], None]) -> None:
        """Call ``fn`` (no arguments) once the current transaction commits (at once outside one),
        never if it rolls back (``durableflow.engine.observing``)."""

    # Executions ---------------------------------------------------------------------------

    def create_execution(self, fields: dict[str, Any]) -> ExecutionRow | None:
        """Insert an execution; ``None`` if its id or (workflow, idempotency key) is taken,
        without breaking the caller's transaction."""

    def create_and_enqueue(self, fields: dict[str, Any], task: str, args: tuple, queue: str) -> ExecutionRow | None:
        """``create_execution``, then ``enqueue`` for the new row. The message may leave before
        the row is committed, and even when nothing was inserted (callers give a fresh id): its
        delivery may find no row yet: such a storage's ``claim`` waits for the row a little."""

    def create_executions(self, fields_list: list[dict[str, Any]]) -> Sequence[ExecutionRow | None]:
        """Insert many (each dict with the same fields) in one statement where possible: a list
        in the same order, ``None`` where the id or key is taken."""

    def get_execution(self, execution_id: str, fields: tuple[str, ...] | None = None) -> ExecutionRow | None:
        """The row, or ``None``; ``fields`` names the only columns the caller reads (a storage
        may fill in more)."""

    def find_execution(self, workflow: str, idempotency_key: str) -> ExecutionRow | None:
        """The execution of ``workflow`` started with ``idempotency_key``, or ``None``."""

    def update_execution(
        self, execution_id: str, fields: dict[str, Any], *, statuses: Iterable[str] | None = None, token: Any = ANY
    ) -> int:
        """Conditional update: only while the status is in ``statuses`` and (unless ``ANY``) the
        lease token equals ``token``; returns the count."""

    def update_executions(
        self, ids: Iterable[str], fields: dict[str, Any], *, statuses: Iterable[str] | None = None
    ) -> list[tuple[str, str]]:
        """``update_execution`` for many (locked, then changed): the (id, queue) of those changed."""

    def mark_executions(
        self, ids: Iterable[str], by_status: dict[str, dict[str, Any]]
    ) -> list[tuple[str, str, str]]:
        """Lock those of ``ids`` whose status is a key of ``by_status``, then give each the fields
        of its status: the (id, queue, status) of those changed."""

    def execution_ids(self, *, parent_id: str | None = None, statuses: Iterable[str] | None = None) -> list[str]:
        """Ids of the executions with that parent and a status in ``statuses`` (each if given)."""

    def prunable(self, before: datetime, limit: int) -> list[str]:
        """Ids of finished executions that ended before ``before`` and that no unfinished
        execution waits for (a child waiter), at most ``limit``."""

    def delete_finished(self, ids: list[str]) -> int:
        """Lock those of ``ids`` still prunable (as ``prunable``, whenever they ended), then
        delete them with their journal, waiters, signals, stream chunks, effect and store watches
        (their rate-limit admissions stay, unlinked, until ``drop_spent_admissions``): how many
        were deleted."""

    # A delivery (leases and the journal) --------------------------------------------------

    def claim(
        self,
        execution_id: str,
        token: str,
        lease_seconds: float,
        *,
        holder: str | None = None,
        take_over: str | None = None,
    ) -> ClaimRow | None:
        """Compare-and-set the lease if the execution is claimable (``predicates.CLAIMABLE``, judged
        by the storage's clock: a status that may run, due if it must be, the lease free — none,
        expired, or the token ``take_over`` — and admitted), recording ``holder``: a ``ClaimRow``,
        or ``None``. A storage whose starts publish before their row commits
        (``create_and_enqueue``) waits a little for a row it does not find, then claims again."""

    def keep_lease(self, execution_id: str, token: str, seconds: float) -> LeaseHandle:
        """Keep renewing the lease while steps run: a handle whose ``.lost`` says it was taken."""

    def release_lease(self, handle: LeaseHandle) -> None:
        """Stop renewing the lease of ``handle`` (one ``keep_lease`` returned)."""

    def holds_lease(self, execution_id: str, token: str) -> bool:
        """Whether ``token`` is the execution's lease token."""

    def insert_step(self, execution_id: str, token: str, record: StepRecordData) -> bool:
        """One fenced write: inserted only while ``token`` holds the lease and the key is not
        recorded yet; returns whether it was inserted."""

    def update_step(
        self,
        execution_id: str,
        key: str,
        fields: dict[str, Any],
        *,
        token: Any = ANY,
        statuses: Iterable[str] | None = None,
    ) -> int:
        """Update a journal entry, fenced (``token``) or conditional on the step's status; a count."""

    def get_step(self, execution_id: str, key: str) -> StepRecordData | None:
        """The journal entry of ``key``, or ``None``."""

    def steps(self, execution_id: str) -> list[StepRecordData]:
        """The journal, in the order it was written."""

    def complete_steps(
        self, pairs: Iterable[tuple[str, str]], fields: dict[str, Any], *, kind: str, statuses: Iterable[str]
    ) -> int:
        """Update the steps of ``kind`` in ``statuses`` named by exact (execution id, key) pairs; a count."""

    def insert_steps(self, execution_id: str, token: str, records: list[StepRecordData]) -> bool:
        """Fenced insert of several new records at once (all or none); returns whether it was done."""

    def record_outcome(
        self, execution_id: str, token: str, fields: dict[str, Any], *, if_woken: dict[str, Any] | None = None
    ) -> OutcomeRow | None:
        """The delivery's fenced outcome; with ``if_woken``, those fields instead when a wake-up
        arrived while the lease was held (``wake_pending``): an ``OutcomeRow``, or ``None`` if
        the lease is gone."""

    # Waits (events, signals, tokens, children) --------------------------------------------

    def add_waiter(self, fields: dict[str, Any]) -> WaiterRow:
        """Insert a waiter; the existing one if its (execution, key) is taken."""

    def get_waiter(self, execution_id: str, key: str) -> WaiterRow | None:
        """The waiter of that step, or ``None``."""

    def open_waiters(
        self, kind: str, target: str, *, execution_id: str | None = None, payload: Any = ANY
    ) -> Sequence[WaiterRow]:
        """Open waiters of ``kind`` on ``target``, oldest first; with ``payload``, a storage may
        leave out those whose ``match`` that payload does not contain (the caller checks)."""

    def update_waiter(self, waiter_id: int, fields: dict[str, Any], *, statuses: Iterable[str]) -> int:
        """Conditional on the waiter's status; a count."""

    def lock_waits(self, kind: str, key: str) -> None:
        """Serialise, until the current transaction ends, the registrars of waiters of ``kind`` on
        ``key`` (``waits.lock_key``) and the ``satisfy_waits`` that may satisfy them (an advisory
        lock where the database has one; SQLite's IMMEDIATE transactions and the memory storage's
        lock serialise writers already)."""

    def satisfy_waits(self, request: Satisfaction) -> Satisfied | None:
        """In one transaction (the caller's, if one is open) under ``lock_waits(kind, lock)``:
        store ``request.event`` (nothing more if its (kind, event_id) is taken: ``repeat``), with
        the execution ``request.owner`` names (nothing at all if it names none: ``owner`` None);
        give it to every open waiter of (kind, target) (of the owner only, if ``addressed``) whose
        ``match`` contains ``request.payload`` (``waits.contains``), the earliest waiter of each
        execution (without an event: close them all, satisfied); complete the step records of the
        waiters taken that ``settle`` while they are waiting, with the ``settle`` fields (its
        ``meta`` merged into theirs); and move their executions by ``moves``. ``unsure``: open
        waiters whose ``match`` this storage cannot judge were left to the caller.

        ``None``: this storage offers no such single round trip; the caller does the same step by
        step (``durableflow.engine.waits.satisfy_steps``)."""

    def add_event(self, fields: dict[str, Any]) -> EventRow | None:
        """Insert an event (or signal, or token completion); ``None`` if its (kind, event_id) is taken."""

    def get_event(self, pk: int) -> EventRow | None:
        """The event, or ``None``."""

    def events_for(self, waiter: WaiterRow, *, after: int, limit: int) -> Sequence[EventRow]:
        """Events that could satisfy ``waiter``, in publication order (id > ``after``), leaving out
        those its execution consumed; events of a type only if published since the execution was
        created. A storage may leave out those whose payload does not contain ``match``; the
        caller checks."""

    def take_event(self, waiter_id: int, event_pk: int) -> str:
        """Satisfy the open waiter with the event: ``TAKEN``, ``CLOSED`` (not open any more) or
        ``CONSUMED`` (its execution consumed that event already)."""

    def watch_execution(self, execution_id: str) -> ExecutionRow | None:
        """Mark the execution as waited for, then return it (``None`` if unknown)."""

    def watchers(self, execution_id: str) -> list[str]:
        """Ids of the executions with an open child waiter on ``execution_id``."""

    def stranded_waiters(self, limit: int) -> list[str]:
        """Ids of waiting executions with an open child waiter on one that ended (the wake-up
        after its outcome was lost: a crash, say)."""

    def end_waits(self, execution_id: str, fields: dict[str, Any]) -> None:
        """Close the execution's open waiters (expired) and give its unfinished items ``fields``:
        it ended (cancelled) and nothing may satisfy them."""

    # Sagas and metadata (durableflow.engine.sagas, .metadata, .lineage) -------------------

    def lock_metadata(self, execution_id: str) -> dict[str, Any] | None:
        """The execution's metadata, its row locked until the transaction ends; ``None`` if there
        is no such execution."""

    def add_steps(self, execution_id: str, records: list[StepRecordData]) -> None:
        """Insert records into the journal of an execution no delivery has claimed yet (a fork's
        copy of its origin's journal), unfenced."""

    # Step bodies as their own tasks (map items, run(queue=)) ------------------------------

    def claim_item(self, execution_id: str, key: str, lease_seconds: float) -> tuple[int, dict[str, Any]] | None:
        """Start an attempt of an item of an unfinished execution that may start
        (``predicates.ITEM_CLAIMABLE``: waiting, or running under an attempt older than
        ``lease_seconds``), counting it in the record's attempts: ``(attempt, meta)``, or ``None``."""

    def record_item(
        self,
        execution_id: str,
        key: str,
        attempt: int,
        fields: dict[str, Any],
        *,
        step: str,
        wake: dict[str, dict[str, Any]],
    ) -> ItemRecorded | None:
        """One write: give the item the outcome ``fields`` only while ``attempt`` is its running
        attempt (else ``None``: a stale or repeated attempt, nothing written), and count it off
        the ``LEFT`` of the record of ``step``; the item that brings that count to zero also gives
        the execution the fields of its status in ``wake`` (as ``mark_executions``). Items that
        finish at the same time are counted one after the other (the step's record is locked),
        so exactly one of them finds none left."""

    def finish_item(self, execution_id: str, key: str, attempt: int, fields: dict[str, Any]) -> bool:
        """Write ``fields`` to the item only if ``attempt`` is still its running attempt (counts
        nothing: an attempt given back, an item of a step that keeps no count)."""

    def send_next_item(self, execution_id: str) -> tuple[str, str] | None:
        """Mark the earliest item not sent yet as sent: its (key, queue), or ``None``."""

    def items_left(self, execution_id: str) -> int:
        """How many items of the execution are not finished."""

    def lock_stale_items(self, resend_after: float, limit: int) -> list[tuple[str, str, str]]:
        """Items of unfinished executions sent or started longer ago than ``resend_after``
        seconds and not finished, marked as sent again: (id, key, queue)."""

    # Transactional steps ------------------------------------------------------------------

    def transaction_scope(self) -> AbstractContextManager[Scope]:
        """One transaction on the journal's database for a transactional step's body and its
        fenced record: yields a ``transactions.Scope``; commits on a clean exit; if the block
        raises, rolls everything back, runs the scope's rollback hooks and re-raises. Meanwhile
        a query through any other database alias is refused (``TRANSACTION_WRONG_ALIAS``)."""

    def is_transient(self, exc: BaseException) -> bool:
        """Whether an error raised in a scope calls for running it again (serialization failure,
        deadlock, a busy database)."""

    # Faults (durableflow.engine.faults) ---------------------------------------------------

    def is_fault(self, exc: BaseException) -> bool:
        """Whether an error raised by one of these methods is the database's failure (a lost
        connection, a timeout, a busy database...), not a refusal of the values written: a
        delivery that meets one ends without an outcome and is delivered again."""

    def reset(self) -> None:
        """After a fault: drop the connection (the next call opens a new one); nothing inside a
        transaction."""

    # Effects (durableflow.engine.effects) -------------------------------------------------

    def create_effect(self, fields: dict[str, Any]) -> bool:
        """Insert a pending effect; whether it was inserted (``False``: its id is taken; the
        caller's transaction goes on unharmed)."""

    def get_effect(self, effect_id: str) -> EffectRow | None:
        """The effect, or ``None``."""

    def update_effect(
        self, effect_id: str, fields: dict[str, Any], *, statuses: Iterable[str] | None = None, holder_token: Any = ANY
    ) -> int:
        """Conditional update: only while the status is in ``statuses`` and (unless ``ANY``) the
        holder's token equals ``holder_token``; a count."""

    def hold_effect(self, effect_id: str, execution_id: str, token: str) -> int:
        """One fenced write: while the effect is pending, ``token`` holds the execution's lease
        (unexpired, by the storage's clock) and the effect is not held by another live lease
        (its holder's token is gone or expired), make this delivery its holder and count an
        attempt; a count."""

    def add_effect_watch(self, effect_id: str, execution_id: str, step_key: str) -> None:
        """Once per (effect, execution, step); a repeat changes nothing."""

    def pop_effect_watches(self, effect_id: str) -> list[str]:
        """Delete the effect's watches: the ids of the executions that had them."""

    # Rate limits (durableflow.engine.ratelimits) ------------------------------------------

    def admit(
        self, key: str, limit: int, window: float, units: int, execution_id: str, step_key: str, token: str
    ) -> tuple[bool, datetime] | None:
        """One transaction that serialises the requests of ``key``: while ``token`` holds the
        execution's lease, the step's admission if it has one (``(True, admitted_at)``); else,
        if ``units`` fit after the key's admissions of the last ``window`` seconds and its older
        requests still waiting (``ratelimits.admission_time``, the storage's clock), the
        admission, recorded: ``(True, now)``; else the request, kept in its place, and
        ``(False, when it would fit)``. ``None`` if the lease is not held."""

    def drop_spent_admissions(self, limit: int) -> int:
        """Delete admissions out of their window and requests never admitted, of executions
        finished or gone; a count."""

    # The sweep ----------------------------------------------------------------------------

    def lock_due(self, limit: int) -> list[tuple[str, str, dict[str, Any] | None]]:
        """Waiting executions whose ``wake_at`` passed, locked: (id, queue, waiting_for)."""

    def lock_stale(self, redeliver_after: float, limit: int) -> list[tuple[str, str]]:
        """Runnable executions nobody is on (lease free or expired) whose last wake-up is older
        than ``redeliver_after`` seconds, locked: (id, queue)."""

    def leased_on(self, host: str, limit: int) -> list[tuple[str, str, str, str]]:
        """Running executions under an unexpired lease whose holder is on ``host``
        (``holders.Holder.host``): (id, queue, token, holder)."""

    def lock_overdue(self, limit: int) -> list[tuple[str, datetime]]:
        """Unfinished executions whose ``deadline_at`` passed and that no cancel was asked of
        yet, earliest deadline first, locked: (id, deadline_at)."""

    # Concurrency keys (durableflow.engine.concurrency) ------------------------------------

    def lock_slots(self, workflow: str, key: str) -> None:
        """Serialise the slot decisions of (workflow, key) until the current transaction ends (an
        advisory lock where the database has one)."""

    def slots(self, workflow: str, key: str) -> tuple[int, int, int]:
        """Over the unfinished runs of that key: (holders: those without a ticket, queued: those
        with one, the highest ticket or 0)."""

    def queued_runs(self, workflow: str, key: str, limit: int) -> list[tuple[str, str]]:
        """The unfinished queued runs of that key, lowest ticket first: (id, queue)."""

    def queued_keys(self, limit: int) -> list[tuple[str, str]]:
        """Distinct (workflow, key) that have unfinished queued runs."""

    # Streams (durableflow.engine.streams) -------------------------------------------------

    def write_chunk(self, execution_id: str, token: str, stream_id: str, seq: int, chunk: Any, at: datetime) -> bool:
        """One fenced write: store chunk ``seq`` of ``stream_id`` only while ``token`` holds the
        execution's lease and (execution, stream_id, seq) is not stored yet; whether it was stored."""

    def last_chunk(self, execution_id: str, stream_id: str) -> int:
        """The highest seq stored of that stream (0: none)."""

    def chunks(self, execution_id: str, stream_id: str, after: int, limit: int) -> list[Any]:
        """The stream's chunks with seq > ``after``, in order, at most ``limit`` (rows with
        ``.seq``, ``.chunk``, ``.at``)."""

    def stream_ids(self, execution_id: str) -> dict[str, int]:
        """The execution's streams: ``{stream_id: highest seq}``."""

    # Stores (durableflow.engine.stores) ---------------------------------------------------

    def get_store(self, name: str, store_id: str) -> StoreRow | None:
        """The store, or ``None``."""

    def lock_store(self, name: str, store_id: str) -> StoreRow | None:
        """``get_store``, the row locked until the transaction ends."""

    def create_store(self, fields: dict[str, Any]) -> None:
        """Insert unless (name, store_id) exists, without breaking the caller's transaction."""

    def write_store(
        self, name: str, store_id: str, fields: dict[str, Any], *, instance_id: str, version: int
    ) -> int:
        """Compare-and-set: change the store only at that instance and version; a count."""

    def delete_store(self, name: str, store_id: str, *, instance_id: str, version: int) -> int:
        """Compare-and-set, as ``write_store``, deleting it; a count."""

    def get_applied(self, execution_id: str, key: str) -> AppliedRow | None:
        """The ledger entry of a step that changed a store, or ``None``."""

    def record_applied(self, fields: dict[str, Any], *, token: str) -> bool:
        """Insert a ledger entry, fenced: only while ``token`` holds the lease of
        ``fields["execution_id"]`` and the step has no entry yet; whether it was inserted."""

    def store_waiters(self, name: str, store_id: str) -> Sequence[StoreWaiterRow]:
        """The store's waiters not woken yet."""

    def put_store_waiter(self, fields: dict[str, Any]) -> None:
        """Insert the waiter of (execution_id, key), replacing any earlier one."""

    def delete_store_waiter(self, execution_id: str, key: str) -> int:
        """Delete the waiter of that step; a count."""

    def wake_store_waiters(self, ids: Iterable[int]) -> int:
        """Mark waiters woken (``woken_at``); a count."""

    def woken_waiter_executions(self, statuses: Iterable[str], limit: int) -> list[str]:
        """Ids of executions in ``statuses`` that wait for a store (``waiting_for["kind"] ==
        "store"``) and have a woken waiter."""

    def drop_woken_waiters(self, statuses: Iterable[str]) -> int:
        """Delete woken waiters of executions in ``statuses``; a count."""
