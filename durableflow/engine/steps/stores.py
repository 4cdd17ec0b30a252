"""``ctx.step.store(definition, id=None)``: durable stores as journaled steps.

Every operation is a step (kinds ``store_get``, ``store_select``, ``store_update``,
``store_update_from``, ``store_delete_from``, ``store_when``, ``store_take``): a replay returns
the recorded value without touching the store. The work is done by the engine's store verbs
(``durableflow.engine.stores``); changes are applied exactly once per (execution, step key).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable

from durableflow.engine.records import LeaseLost, StepRecordData
from durableflow.engine.states import StepStatus
from durableflow.engine.steps.base import StepBase, started_at
from durableflow.engine.store_types import (
    StepRef,
    StoreDefinition,
    StoreFailure,
    StoreResult,
    StoreSnapshot,
    check_store_id,
    resolve_store,
)
from durableflow.engine.tracking import require_sync

if TYPE_CHECKING:
    from durableflow.engine.context import Context

__all__ = ["StoreSteps", "StoreHandle"]


class StoreSteps(StepBase):
    def store(self, definition: StoreDefinition | str, id: str | None = None) -> StoreHandle:  # noqa: A002
        """A handle on the store ``definition`` + ``id`` (default: this execution's id)."""
        store_id = check_store_id(self._ctx.execution_id if id is None else id)
        return StoreHandle(self._ctx, resolve_store(definition), store_id)


class StoreHandle(StepBase):
    """One store, seen from one execution. Each method is a journaled step."""

    def __init__(self, ctx: Context, definition: StoreDefinition, store_id: str):
        super().__init__(ctx)
        self.definition = definition
        self.id = store_id

    def __repr__(self) -> str:
        return f"<store {self.definition.name}/{self.id}>"

    # Reads -------------------------------------------------------------------------------

    def get(self, *args: Any) -> StoreSnapshot:
        """``get(key=None)``: the state, version and instance id (``StoreSnapshot``)."""
        key, rest = self._delivery.key(args)
        _arity("get([key])", rest, 0)
        value = self._step(key, "store_get", lambda engine, step: engine.store_get(self.definition, self.id).as_value())
        return StoreSnapshot.from_value(value)

    def select(self, *args: Any) -> Any:
        """``select(key, selector)``: ``selector(state)`` on a read-only view, journaled."""
        key, rest = self._delivery.key(args)
        (selector,) = _arity("select(key, selector)", rest, 1)
        require_sync(selector, "selector")
        return self._step(
            key, "store_select", lambda engine, step: engine.store_select(self.definition, self.id, selector)
        )

    # Changes -----------------------------------------------------------------------------

    def update(self, key: str, updater: Callable[[Any], Any]) -> StoreResult:
        """Apply ``updater(draft)`` (mutate the draft, or return the new state), exactly once."""
        key = self._explicit(key, "update(key, updater)")
        require_sync(updater, "updater")
        value = self._step(
            key, "store_update", lambda engine, step: engine.store_update(self.definition, self.id, updater, step=step)
        )
        return StoreResult.from_value(value)

    def update_from(
        self, key: str, snapshot: StoreSnapshot | StoreResult, updater: Callable[[Any], Any]
    ) -> StoreResult:
        """``update`` only if the store is still at ``snapshot``'s version: else ``status == "conflict"``."""
        key = self._explicit(key, "update_from(key, snapshot, updater)")
        require_sync(updater, "updater")
        expected = _expected(snapshot)
        value = self._step(
            key,
            "store_update_from",
            lambda engine, step: engine.store_update(self.definition, self.id, updater, expected=expected, step=step),
        )
        return StoreResult.from_value(value)

    def delete_from(self, key: str, snapshot: StoreSnapshot | StoreResult) -> StoreResult:
        """Delete the store if it is still at ``snapshot``'s version: else ``status == "conflict"``."""
        key = self._explicit(key, "delete_from(key, snapshot)")
        expected = _expected(snapshot)
        value = self._step(
            key,
            "store_delete_from",
            lambda engine, step: engine.store_delete(self.definition, self.id, expected=expected, step=step),
        )
        return StoreResult.from_value(value)

    # Waits -------------------------------------------------------------------------------

    def when(self, *args: Any) -> Any:
        """``when(key=None, selector)``: wait until ``selector(state)`` is truthy; return it."""
        key, rest = self._delivery.key(args)
        (selector,) = _arity("when([key], selector)", rest, 1)
        require_sync(selector, "selector")
        return self._wait(key, "store_when", selector, None)

    def take(self, key: str, selector: Callable[[Any], Any], claim: Callable[[Any, Any], Any]) -> Any:
        """Wait until ``selector(state)`` is truthy, then apply ``claim(draft, selected)`` in the same
        transaction, exactly once; return the selected value. Consumers never share a claim."""
        key = self._explicit(key, "take(key, selector, claim)")
        require_sync(selector, "selector")
        require_sync(claim, "claim")
        return self._wait(key, "store_take", selector, claim)

    # Internals ---------------------------------------------------------------------------

    def _step(self, key: str, kind: str, call: Callable[[Any, StepRef], Any]) -> Any:
        delivery = self._delivery
        replayed = delivery.replayed(key, kind)
        if replayed.done:
            return replayed.value
        record = replayed.record
        started, value = self._live(key, kind, record, call)
        delivery.record_live(key, kind, value, attempts=1, meta=self._meta(), started_at=started_at(record, started))
        return value

    def _live(self, key: str, kind: str, record: StepRecordData | None, call: Callable[[Any, StepRef], Any]) -> Any:
        """Run the engine's verb for this step: ``(started, value)``; failures are recorded."""
        ctx = self._ctx
        delivery = self._delivery
        delivery.go_live()
        started = delivery.journal.now()
        first_try = record is None and ctx.delivery == 1
        step = StepRef(ctx.execution_id, key, delivery.journal.token, kind, first_try)
        delivery.in_step = key  # a callback that calls a step is refused (NESTED_STEP)
        try:
            return started, call(delivery.engine, step)
        except StoreFailure as failure:
            delivery.in_step = None
            self._record_failure(kind, key, record, 1, failure.error, started)
        except LeaseLost as lost:
            raise delivery.latch(lost) from None
        finally:
            delivery.in_step = None

    def _wait(self, key: str, kind: str, selector: Callable, claim: Callable | None) -> Any:
        delivery = self._delivery
        replayed = delivery.replayed(key, kind)
        if replayed.done:
            return replayed.value
        record = replayed.record
        started, watched = self._live(
            key,
            kind,
            record,
            lambda engine, step: engine.store_watch(self.definition, self.id, selector, step=step, claim=claim),
        )
        if watched.matched:
            delivery.record_live(
                key, kind, watched.value, attempts=1, meta=self._meta(), started_at=started_at(record, started)
            )
            return watched.value
        if record is None:
            delivery.write(
                StepRecordData(key=key, kind=kind, status=StepStatus.WAITING, meta=self._meta(), started_at=started),
                new=True,
            )
        raise delivery.suspend(
            None,
            {"kind": "store", "step": key, "store": self.definition.name, "id": self.id, "version": watched.version},
        )

    def _explicit(self, key: Any, usage: str) -> str:
        if not isinstance(key, str):
            raise TypeError(f"store.{usage}: the step key comes first")
        return self._delivery.key((key,))[0]

    def _meta(self) -> dict[str, Any]:
        return {"store": self.definition.name, "id": self.id}


def _arity(usage: str, rest: tuple, count: int) -> tuple:
    if len(rest) != count or (count and not callable(rest[-1])):
        raise TypeError(f"store.{usage}: wrong arguments")
    return rest


def _expected(snapshot: Any) -> tuple[str, int]:
    try:
        return snapshot.instance_id, snapshot.version
    except AttributeError:
        raise TypeError(
            "a store snapshot (from get(), or the result of update/update_from) is needed, "
            f"not {type(snapshot).__name__}"
        ) from None
