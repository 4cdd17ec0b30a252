"""Store definitions and the values store operations return.

``durableflow.define_store(name, initial=, schema=)`` names a kind of store; each store of
that kind is one ``(name, id)`` row holding a durable value (its *state*), a *version* that
every committed change moves on by one, and an *instance id* that a delete-and-recreate
replaces. Plain Python: used by the engine, the storages and the Django face alike.
"""

from __future__ import annotations

import sys
import threading
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, Callable

from durableflow import exceptions

__all__ = [
    "StoreDefinition",
    "define_store",
    "store_definitions",
    "resolve_store",
    "check_store_id",
    "StoreSnapshot",
    "StoreResult",
    "StepRef",
    "Watched",
    "StoreFailure",
    "MAX_STORE_ID_LENGTH",
]

MAX_STORE_ID_LENGTH = 200
UPDATED, DELETED, CONFLICT = "updated", "deleted", "conflict"


@dataclass(frozen=True)
class StoreDefinition:
    """A kind of store: its name, how a missing one starts, and the schema of every state."""

    name: str
    initial: Any = field(default=None, compare=False)
    schema: Any = field(default=None, compare=False)
    origin: str = field(default="", compare=False)  # the module that defined it

    def initial_state(self) -> Any:
        """The state of a store created now: ``initial()`` if callable, else a copy of it."""
        if callable(self.initial):
            return self.initial()
        from durableflow.engine.tracking import draft

        return {} if self.initial is None else draft(self.initial)

    @cached_property
    def _adapter(self) -> Any:
        from pydantic import TypeAdapter

        return self.schema if isinstance(self.schema, TypeAdapter) else TypeAdapter(self.schema)

    def validate(self, state: Any) -> Any:
        """The state as the schema dumps it (JSON mode); ``STORE_SCHEMA_INVALID`` if it fails."""
        if self.schema is None:
            return state
        from pydantic import ValidationError

        try:
            parsed = self._adapter.validate_python(state)
        except ValidationError as exc:
            problems = "; ".join(f"{'/'.join(str(p) for p in err['loc']) or '/'}: {err['msg']}" for err in exc.errors())
            raise exceptions.WorkflowValueError(
                "STORE_SCHEMA_INVALID", f"store {self.name!r}: the new state failed its schema: {problems}"
            ) from None
        return self._adapter.dump_python(parsed, mode="json")


_definitions: dict[str, StoreDefinition] = {}
_lock = threading.Lock()


def define_store(name: str, initial: Any = None, schema: Any = None) -> StoreDefinition:
    """Define a kind of durable store.

    ``initial``: the state of a store created on first use (a callable returning it, or a
    durable value; default ``{}``). ``schema``: a pydantic model or ``TypeAdapter`` that
    validates every new state. The definition is registered by name, so that views, the admin
    and the API can name it (``durableflow.stores.get("cart", id)``).
    """
    if not isinstance(name, str) or not name or len(name) > 200:
        raise ValueError("a store name is a non-empty string of at most 200 characters")
    origin = sys._getframe(1).f_globals.get("__name__", "?")
    definition = StoreDefinition(name=name, initial=initial, schema=schema, origin=origin)
    if schema is not None:
        definition._adapter  # noqa: B018 - a schema pydantic cannot use fails here, at definition time
    with _lock:
        existing = _definitions.get(name)
        # Re-importing the same module (autoreload, tests) defines it again, which is fine.
        if existing is not None and existing.origin != origin:
            raise ValueError(f"Store {name!r} is already defined in {existing.origin}; {origin} cannot reuse the name.")
        _definitions[name] = definition
    return definition


def store_definitions() -> list[StoreDefinition]:
    return sorted(_definitions.values(), key=lambda d: d.name)


def resolve_store(definition: StoreDefinition | str) -> StoreDefinition:
    """The definition itself, or the one defined under that name (``UNKNOWN_STORE``)."""
    if isinstance(definition, StoreDefinition):
        return definition
    found = _definitions.get(definition) if isinstance(definition, str) else None
    if found is None:
        raise exceptions.WorkflowValueError(
            "UNKNOWN_STORE",
            f"no store is defined as {definition!r}; define it with durableflow.define_store() in a module "
            "that is imported at start-up (a 'workflows' module of an installed app)",
        )
    return found


def check_store_id(store_id: Any) -> str:
    if not isinstance(store_id, str) or not store_id or len(store_id) > MAX_STORE_ID_LENGTH:
        raise exceptions.WorkflowValueError(
            "INVALID_STORE_ID", f"a store id is a non-empty string of at most {MAX_STORE_ID_LENGTH} characters"
        )
    return store_id


@dataclass(frozen=True)
class StoreSnapshot:
    """A store's state as read at one version of one instance (``update_from`` compares both)."""

    state: Any
    version: int
    instance_id: str

    def as_value(self) -> dict[str, Any]:
        return {"state": self.state, "version": self.version, "instance_id": self.instance_id}

    @classmethod
    def from_value(cls, value: dict[str, Any]) -> StoreSnapshot:
        return cls(value["state"], value["version"], value["instance_id"])


@dataclass(frozen=True)
class StoreResult:
    """What a change returned: ``status`` is ``"updated"``, ``"deleted"`` or ``"conflict"``.

    On a conflict, ``state``/``version``/``instance_id`` are the store's current ones (a
    missing store's, after a delete, are those it is recreated with); after a delete,
    ``state`` is ``None`` and ``version`` the last one.
    """

    status: str
    state: Any
    version: int
    instance_id: str

    @property
    def snapshot(self) -> StoreSnapshot:
        return StoreSnapshot(self.state, self.version, self.instance_id)

    def as_value(self) -> dict[str, Any]:
        return {"status": self.status, **self.snapshot.as_value()}

    @classmethod
    def from_value(cls, value: dict[str, Any]) -> StoreResult:
        return cls(value["status"], value["state"], value["version"], value["instance_id"])


@dataclass(frozen=True)
class StepRef:
    """The step of a delivery that applies a change: its ledger key and its lease.

    ``first_try``: the first delivery reaches the step and nothing is recorded for it, so no
    earlier delivery can have left a ledger entry or a waiter for it (their reads are skipped).
    """

    execution_id: str
    key: str
    token: str
    kind: str
    first_try: bool = False


@dataclass(frozen=True)
class Watched:
    """A ``when``/``take`` evaluation: the value it matched, or the waiter it registered."""

    matched: bool
    value: Any
    version: int
    instance_id: str


class StoreFailure(Exception):
    """A store operation failed for a reason of the workflow's own (its selector, updater,
    initial or schema): ``error`` is what the step records and raises into workflow code."""

    def __init__(self, error: Exception):
        super().__init__(str(error))
        self.error = error


Callback = Callable[..., Any]
