"""The store verbs: read, change (exactly once per step) and wait for durable stores.

Written once over the storage protocol; ``ctx.step.store(...)`` (``engine/steps/stores.py``)
and ``durableflow.stores`` (views, the admin, the API) both call these methods.

Concurrency. A change runs in one transaction that locks the store row, computes the new
state from the locked one, writes it with a compare-and-set on (instance id, version), wakes
the waiters it concerns and, for a workflow step, inserts a ledger entry fenced by the step's
lease (one statement: only while the lease is the delivery's, once per (execution, key)). So
two workers changing one store take turns, a zombie delivery's change rolls back, and a step
that replays after its change committed (but before its journal record) returns the ledger's
outcome instead of changing the store again. A compare-and-set that matches nothing (a database without row locks under
a writer that does not serialise) rolls back and runs again.

Waiters are registered under the same row lock as changes, from the state their selector
just read: no change can commit in between and go unseen. A change that wakes a waiter
while its execution is still running (between the waiter's commit and the delivery's
outcome) is caught by the sweep (``sweep_store_waiters``), at most one sweep interval late.
"""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING, Any, Callable

from durableflow import exceptions, values
from durableflow.engine import faults, logs, tracking
from durableflow.engine.records import LeaseLost
from durableflow.engine.states import DUE_ONLY, TERMINAL
from durableflow.engine.storage import NOW
from durableflow.engine.store_types import (
    CONFLICT,
    DELETED,
    UPDATED,
    StepRef,
    StoreDefinition,
    StoreFailure,
    StoreSnapshot,
    Watched,
)

if TYPE_CHECKING:
    from durableflow.engine.rows import StoreRow
    from durableflow.engine.verbs import Engine

__all__ = ["Stores"]

logger = logs.logger("durableflow.stores")

_DELETE: Any = object()
_ATTEMPTS = 20  # compare-and-set retries before giving up (only a non-serialising database needs any)


class _Moved(Exception):
    """The store (or the step's ledger entry) changed under this transaction: run it again."""

    def __init__(self) -> None:
        super().__init__("the store changed under the transaction")


def _call(fn: Callable[..., Any], role: str, *args: Any) -> Any:
    """Run a workflow's callback; its failure is the step's (``StoreFailure``), not the engine's."""
    try:
        return tracking.check_result(fn(*args), role, fn)
    except Exception as exc:  # any error of the workflow's own code
        raise StoreFailure(exc) from exc


class Stores:
    """The store verbs (a mixin of ``Engine``)."""

    # Reading ------------------------------------------------------------------------------

    def store_get(self: Engine, definition: StoreDefinition, store_id: str) -> StoreSnapshot:
        """The store's state, version and instance id; a missing store is created first."""
        row = self._store_row(definition, store_id, lock=False)
        return StoreSnapshot(row.state, row.version, row.instance_id)

    def store_select(self: Engine, definition: StoreDefinition, store_id: str, selector: Callable) -> Any:
        """``selector(state)`` on a read-only view of the state, as a durable value."""
        tracking.require_sync(selector, "selector")
        state = self.store_get(definition, store_id).state
        return self._selected(selector, state, tracking.Reads())

    # Changing -----------------------------------------------------------------------------

    def store_update(
        self: Engine,
        definition: StoreDefinition,
        store_id: str,
        updater: Callable,
        *,
        expected: tuple[str | None, int] | None = None,
        step: StepRef | None = None,
    ) -> dict[str, Any]:
        """Apply ``updater`` (mutate the draft, or return the new state); the result as a value.

        ``expected`` (instance id or None for any, version): a compare-and-set against a
        snapshot; a store that moved on answers ``{"status": "conflict", ...}`` and is not
        changed. ``step``: the workflow step that applies it, exactly once (see the module's
        docstring).
        """
        tracking.require_sync(updater, "updater")

        def decide(row: Any) -> tuple[dict[str, Any] | None, Any]:
            if expected is not None and not _at(row, expected):
                return _result(CONFLICT, row), None
            return None, self._updated(definition, updater, row.state)

        return self._change(definition, store_id, step, decide)

    def store_delete(
        self: Engine,
        definition: StoreDefinition,
        store_id: str,
        *,
        expected: tuple[str, int],
        step: StepRef | None = None,
    ) -> dict[str, Any]:
        """Delete the store if it is still at ``expected`` (instance id, version), else a conflict.

        Every waiter of the store wakes; the next use creates a new instance from ``initial``.
        """

        def decide(row: Any) -> tuple[dict[str, Any] | None, Any]:
            if not _at(row, expected):
                return _result(CONFLICT, row), None
            return None, _DELETE

        return self._change(definition, store_id, step, decide)

    # Waiting ------------------------------------------------------------------------------

    def store_watch(
        self: Engine,
        definition: StoreDefinition,
        store_id: str,
        selector: Callable,
        *,
        step: StepRef,
        claim: Callable | None = None,
    ) -> Watched:
        """``when`` (no ``claim``) and ``take``: match now, or register the step's waiter.

        A truthy ``selector(state)`` is a match: ``take`` then applies ``claim(draft, selected)``
        in the same transaction (exactly once, like an update). Otherwise the waiter is stored
        with the paths the selector read and the version it saw, under the store's row lock.
        """
        tracking.require_sync(selector, "selector")
        if claim is not None:
            tracking.require_sync(claim, "claim")
        storage = self.storage
        for _ in range(_ATTEMPTS):
            try:
                with faults.retrying(storage), storage.atomic():
                    if claim is not None and not step.first_try:
                        applied = storage.get_applied(step.execution_id, step.key)
                        if applied is not None:
                            return _watched(applied.outcome)
                    row = self._store_row(definition, store_id, lock=True)
                    reads = tracking.Reads()
                    selected = self._selected(selector, row.state, reads)
                    if not selected:
                        self._register(definition, store_id, row, step, reads)
                        return Watched(False, None, row.version, row.instance_id)
                    if not step.first_try:
                        storage.delete_store_waiter(step.execution_id, step.key)
                    if claim is None:
                        return Watched(True, selected, row.version, row.instance_id)
                    state = self._updated(definition, lambda draft: claim(draft, selected), row.state, role="claim")
                    outcome = {"value": selected, "version": row.version + 1, "instance_id": row.instance_id}
                    self._write(definition, store_id, row, state, step, outcome)
                    return _watched(outcome)
            except Exception as exc:  # noqa: BLE001 - sorted by _again
                self._again(exc)
        raise _gave_up(definition, store_id)

    def sweep_store_waiters(self: Engine, limit: int) -> int:
        """Wake executions whose store waiter was woken while they were still running.

        Such a wake-up found the execution running (the change committed between the waiter's
        registration and the delivery's outcome) and so changed nothing; the waiter kept the
        mark. Safe to run from several sweeps at once: waking is a compare-and-set. Woken
        waiters of finished executions are dropped.
        """
        storage = self.storage
        with storage.atomic():
            waiting = storage.woken_waiter_executions(DUE_ONLY, limit)
            woken = self.wake(waiting) if waiting else []
            storage.drop_woken_waiters(TERMINAL)
        return len(woken)

    # Internals ----------------------------------------------------------------------------

    def _store_row(self: Engine, definition: StoreDefinition, store_id: str, *, lock: bool) -> StoreRow:
        """The store (locked, if ``lock``), created from ``initial`` if it is missing."""
        storage = self.storage
        read = storage.lock_store if lock else storage.get_store
        for _ in range(_ATTEMPTS):
            row = read(definition.name, store_id)
            if row is not None:
                return row
            state = self._valid_state(definition, _call(definition.initial_state, "initial"))
            storage.create_store(
                {
                    "name": definition.name,
                    "store_id": store_id,
                    "instance_id": uuid.uuid4().hex,
                    "version": 0,
                    "state": state,
                }
            )
        raise _gave_up(definition, store_id)

    def _selected(self: Engine, selector: Callable, state: Any, reads: tracking.Reads) -> Any:
        """The selector's result on a tracking view of ``state``, as a durable value."""
        result = tracking.unwrap(_call(selector, "selector", tracking.track(state, reads)))
        try:
            return values.roundtrip(result, max_bytes=self.settings.max_payload_bytes)[1]
        except exceptions.WorkflowValueError as exc:
            exc.message = f"a store selector returned a value that cannot be journaled: {exc.message}"
            raise StoreFailure(exc) from None

    def _updated(
        self: Engine, definition: StoreDefinition, updater: Callable, state: Any, *, role: str = "updater"
    ) -> Any:
        draft = tracking.draft(state)
        returned = _call(updater, role, draft)
        return self._valid_state(definition, draft if returned is None else returned)

    def _valid_state(self: Engine, definition: StoreDefinition, state: Any) -> Any:
        """A new state as it will be stored: a durable value the schema accepts (as it dumps it)."""
        try:
            decoded = values.roundtrip(state, code="INVALID_STORE_STATE", max_bytes=self.settings.max_payload_bytes)[1]
            return definition.validate(decoded)
        except exceptions.WorkflowValueError as exc:
            if exc.code == "INVALID_STORE_STATE":
                exc.message = f"store {definition.name!r}: the new state is not a durable value: {exc.message}"
            raise StoreFailure(exc) from None

    def _change(
        self: Engine,
        definition: StoreDefinition,
        store_id: str,
        step: StepRef | None,
        decide: Callable[[Any], tuple[dict[str, Any] | None, Any]],
    ) -> dict[str, Any]:
        storage = self.storage
        for _ in range(_ATTEMPTS):
            try:
                with faults.retrying(storage), storage.atomic():
                    if step is not None and not step.first_try:
                        applied = storage.get_applied(step.execution_id, step.key)
                        if applied is not None:
                            return applied.outcome
                    row = self._store_row(definition, store_id, lock=True)
                    refused, state = decide(row)
                    if refused is not None:
                        return refused
                    if state is _DELETE:
                        outcome = {"status": DELETED, "state": None, "version": row.version}
                    else:
                        outcome = {"status": UPDATED, "state": state, "version": row.version + 1}
                    outcome["instance_id"] = row.instance_id
                    self._write(definition, store_id, row, state, step, outcome)
                    return outcome
            except Exception as exc:  # noqa: BLE001 - sorted by _again
                self._again(exc)
        raise _gave_up(definition, store_id)

    def _again(self: Engine, exc: Exception) -> None:
        """Return (run the transaction again) if it was rolled back for a reason that passes:
        the store moved under it, or the database asked for a retry (a serialization failure,
        a deadlock, SQLite's busy timeout). Raise anything else."""
        if isinstance(exc, _Moved):
            return
        if not isinstance(exc, StoreFailure) and self.storage.is_transient(exc):
            logger.info("store transaction rolled back (%s); running it again", exc)
            return
        raise exc

    def _register(
        self: Engine, definition: StoreDefinition, store_id: str, row: Any, step: StepRef, reads: tracking.Reads
    ) -> None:
        """Store the step's waiter: the paths its selector read and the version it saw."""
        storage = self.storage
        storage.put_store_waiter(
            {
                "execution_id": step.execution_id,
                "key": step.key,
                "name": definition.name,
                "store_id": store_id,
                "instance_id": row.instance_id,
                "version": row.version,
                "reads": reads.as_list(),
            }
        )
        if not row.has_waiters:
            marked = storage.write_store(
                definition.name, store_id, {"has_waiters": True}, instance_id=row.instance_id, version=row.version
            )
            if not marked:
                raise _Moved()

    def _write(
        self: Engine,
        definition: StoreDefinition,
        store_id: str,
        row: Any,
        state: Any,
        step: StepRef | None,
        outcome: dict[str, Any],
    ) -> None:
        """Write the locked ``row``'s new state (or delete it) with its ledger entry; wake its waiters.

        The ledger entry is inserted last and fenced by the step's lease: a delivery that lost
        it rolls the whole change back (``LeaseLost``).
        """
        storage, name = self.storage, definition.name
        waiters = storage.store_waiters(name, store_id) if row.has_waiters else []
        woken = [
            waiter
            for waiter in waiters
            if state is _DELETE
            or waiter.instance_id != row.instance_id
            or tracking.touched(row.state, state, waiter.reads)
        ]
        if state is _DELETE:
            written = storage.delete_store(name, store_id, instance_id=row.instance_id, version=row.version)
        else:
            fields = {"state": state, "version": row.version + 1, "updated_at": NOW}
            if row.has_waiters:
                fields["has_waiters"] = len(woken) < len(waiters)
            written = storage.write_store(name, store_id, fields, instance_id=row.instance_id, version=row.version)
        if not written:
            raise _Moved()
        if step is not None:
            entry = {
                "execution_id": step.execution_id,
                "key": step.key,
                "kind": step.kind,
                "name": name,
                "store_id": store_id,
                "instance_id": row.instance_id,
                "version": outcome["version"],
                "outcome": outcome,
            }
            if not storage.record_applied(entry, token=step.token):
                if not storage.holds_lease(step.execution_id, step.token):
                    raise LeaseLost(step.execution_id)  # a zombie delivery: its change rolls back
                raise _Moved()  # another delivery of this step applied it: read its outcome
        if woken:
            storage.wake_store_waiters([waiter.id for waiter in woken])
            self.wake(sorted({waiter.execution_id for waiter in woken}))
            logger.debug("store %s/%s: %d waiter(s) woken", name, store_id, len(woken))


def _at(row: Any, expected: tuple[str | None, int]) -> bool:
    instance_id, version = expected
    return (instance_id is None or instance_id == row.instance_id) and version == row.version


def _result(status: str, row: Any) -> dict[str, Any]:
    return {"status": status, "state": row.state, "version": row.version, "instance_id": row.instance_id}


def _watched(outcome: dict[str, Any]) -> Watched:
    return Watched(True, outcome["value"], outcome["version"], outcome["instance_id"])


def _gave_up(definition: StoreDefinition, store_id: str) -> RuntimeError:
    return RuntimeError(
        f"store {definition.name}/{store_id} kept changing under {_ATTEMPTS} attempts to change it; "
        "is the database serialising writers (PostgreSQL row locks, SQLite IMMEDIATE transactions)?"
    )
