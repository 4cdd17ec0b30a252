"""Durable stores from outside workflows: views, the admin, the API, management commands.

    import durableflow

    Cart = durableflow.define_store("cart", initial=lambda: {"items": []})

    def add_item(request, cart_id):
        result = durableflow.stores.update(Cart, cart_id, lambda draft: draft["items"].append(item))
        ...

The same verbs as ``ctx.step.store(...)`` (``durableflow.engine.stores``): a change wakes the
executions waiting (``when``/``take``) for what it changed, once the caller's transaction
commits. A missing store is created from its definition's ``initial`` first.
"""

from __future__ import annotations

from typing import Any, Callable

from durableflow.engine.store_types import (
    StoreDefinition,
    StoreFailure,
    StoreResult,
    StoreSnapshot,
    check_store_id,
    define_store,
    resolve_store,
    store_definitions,
)

__all__ = ["define_store", "get", "update", "definitions", "StoreDefinition", "StoreSnapshot", "StoreResult"]


def definitions() -> list[StoreDefinition]:
    """Every defined store, by name."""
    return store_definitions()


def get(definition: StoreDefinition | str, store_id: str) -> StoreSnapshot:
    """The store's state, version and instance id (a definition, or the name it was defined under)."""
    from durableflow import operations

    try:
        return operations.engine().store_get(resolve_store(definition), check_store_id(store_id))
    except StoreFailure as failure:
        raise failure.error from None


def update(
    definition: StoreDefinition | str,
    store_id: str,
    updater: Callable[[Any], Any],
    *,
    expected_version: int | None = None,
) -> StoreResult:
    """Apply ``updater(draft)`` (mutate the draft or return the new state) and wake its waiters.

    Runs in the caller's transaction (a savepoint of it); the waiters' deliveries are sent
    once it commits. With ``expected_version``, a store that moved past that version is not
    changed: the result's ``status`` is ``"conflict"``. A state the schema refuses raises
    ``WorkflowValueError("STORE_SCHEMA_INVALID")`` and changes nothing; an error of the
    updater is raised as it is.
    """
    from durableflow import operations

    expected = None if expected_version is None else (None, expected_version)
    try:
        value = operations.engine().store_update(
            resolve_store(definition), check_store_id(store_id), updater, expected=expected
        )
    except StoreFailure as failure:
        raise failure.error from None
    return StoreResult.from_value(value)
