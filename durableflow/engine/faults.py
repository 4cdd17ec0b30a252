"""Storage faults: what a delivery does when the database fails under it.

A database error raised by one of durableflow's own storage operations (a dropped or refused
connection, a connection terminated by an administrator, a statement timeout, a serialization
failure or deadlock, SQLite's "database is locked", a read-only standby after a failover...)
says nothing about the workflow. It must neither reach workflow code nor be recorded as the
run's failure: the delivery ends without an outcome, its connection is dropped, and it is
delivered again a moment later (``Engine.deliver``; the task sends it again with back-off).

``Guarded`` is the storage a delivery uses: the same methods, but an error that ``is_fault``
says is the storage's comes out as ``StorageFault``, a ``BaseException``, so that ``except
Exception`` in workflow code cannot swallow it, and the first one is latched (``fault``): the
context raises it again at every later step, and the driver ends the delivery with it whatever
the workflow code did with it. Errors raised by the user's own code (a step body, a
transactional step's ORM work) never pass through the storage's methods, so they stay the
user's: recorded, retried by the step's policy, raised into the workflow.

The engine's own retries of a transaction (a transactional step, a store's compare-and-set)
run inside ``retrying()``: there a transient error (serialization failure, deadlock, a busy
database) comes out as it is, for the loop to run the transaction again; any other fault is
still a ``StorageFault``.

Broker errors never come this far: ``durableflow.dispatch`` logs a message that cannot be sent
and returns (the sweep sends it again).
"""

from __future__ import annotations

import inspect
import random
from contextlib import AbstractContextManager, contextmanager, nullcontext
from typing import Any, Callable, Iterator

__all__ = [
    "FAULT",
    "MAX_RESENDS",
    "StorageFault",
    "Guarded",
    "guard",
    "unguarded",
    "retrying",
    "is_fault",
    "resend_delay",
]

FAULT = "storage-fault"  # what a delivery (or an item task) the database failed under returns

# PEP 249's two branches of ``Error``: Django's, psycopg's and sqlite3's errors all derive from them.
_DATABASE_ERRORS = frozenset({"InterfaceError", "DatabaseError"})
# Errors about the values written, not about the database: running it again would fail again.
_VALUE_ERRORS = frozenset({"IntegrityError", "DataError"})

# A faulted delivery is sent again after about 0.25, 0.5, 1, 2, 4 s, then every 5 s, this many
# times in a row (about half a minute in all); after that the sweep sends it again, once its
# lease is free or expired.
MAX_RESENDS = 10
_RESEND_BASE, _RESEND_CAP = 0.25, 5.0


class StorageFault(BaseException):
    """A storage operation failed for a reason of the database's, not of the workflow's: end the
    delivery without an outcome and deliver it again.

    A ``BaseException`` latched on the delivery, like ``LeaseLost``: workflow code's ``except
    Exception`` lets it pass, and ``except BaseException`` cannot keep it from ending the delivery.
    """


def is_fault(exc: BaseException) -> bool:
    """Whether ``exc``, raised by a storage operation, is the database's failure.

    Any database error of the DB-API's tree (Django's wrappers, psycopg's and sqlite3's own,
    recognised by their class names, so that no driver is imported) except an integrity or
    data error, which says that what was written cannot be, and would say it again.
    """
    names = {cls.__name__ for cls in type(exc).__mro__}
    return bool(names & _DATABASE_ERRORS) and not names & _VALUE_ERRORS


def resend_delay(resends: int) -> float:
    """Seconds before sending a faulted delivery again, after ``resends`` earlier re-sends:
    doubling from 0.25 s up to 5 s, each between half and all of that (so that the deliveries
    one outage ended do not all come back at once)."""
    ceiling = min(_RESEND_CAP, _RESEND_BASE * 2 ** max(0, resends))
    return ceiling / 2 + random.uniform(0, ceiling / 2)


class Guarded:
    """A storage whose faults end the delivery (see the module docstring): one per delivery.

    Every method of the wrapped storage is offered as it is, except that an error it raises
    for which the storage's ``is_fault`` answers True is raised as ``StorageFault`` (from it),
    and the first such fault is kept in ``fault``. ``atomic()`` and ``transaction_scope()``
    guard their commit too. Attributes that are not methods are the wrapped storage's.

    ``Guarded(storage)`` is an instance of a class made once per storage class, whose methods
    are the storage class's public ones, guarded (a delivery builds its guard for nothing); each
    call looks the method up on the storage, so that one replaced on the instance is the one called.
    """

    def __new__(cls, storage: Any) -> Guarded:
        if cls is Guarded:
            cls = _guarded_class(type(unguarded(storage)))
        return super().__new__(cls)

    def __init__(self, storage: Any) -> None:
        self.storage = unguarded(storage)  # a new delivery's guard: nothing latched yet
        self.fault: StorageFault | None = None
        self._retrying = 0

    def __getattr__(self, name: str) -> Any:
        # What the class does not guard: the storage's properties and other attributes.
        return getattr(self.storage, name)

    @contextmanager
    def retrying(self) -> Iterator[None]:
        """A transaction the caller runs again on a transient error: let those through as they are."""
        self._retrying += 1
        try:
            yield
        finally:
            self._retrying -= 1

    def _fault(self, name: str, exc: Exception) -> StorageFault | None:
        storage = self.storage
        if not storage.is_fault(exc) or (self._retrying and storage.is_transient(exc)):
            return None
        fault = StorageFault(f"{name}: {type(exc).__name__}: {exc}".strip())
        if self.fault is None:
            self.fault = fault
        return fault


_BLOCKS = frozenset({"atomic", "transaction_scope"})  # methods that return a transaction
_CLASSES: dict[type, type] = {}


def _guarded_class(storage_class: type) -> type:
    """The ``Guarded`` class for storages of ``storage_class`` (made once)."""
    made = _CLASSES.get(storage_class)
    if made is None:
        methods = {
            name: _guarded_method(name)
            for name in dir(storage_class)
            if not name.startswith("_")
            and not hasattr(Guarded, name)
            and inspect.isfunction(inspect.getattr_static(storage_class, name))
        }
        made = _CLASSES[storage_class] = type(f"Guarded{storage_class.__name__}", (Guarded,), methods)
    return made


def _guarded_method(name: str) -> Callable[..., Any]:
    if name in _BLOCKS:

        def block(self: Guarded, *args: Any, **kwargs: Any) -> AbstractContextManager[Any]:
            return _Block(self, name, getattr(self.storage, name)(*args, **kwargs))

        return block

    def call(self: Guarded, *args: Any, **kwargs: Any) -> Any:
        try:
            return getattr(self.storage, name)(*args, **kwargs)
        except Exception as exc:
            fault = self._fault(name, exc)
            if fault is None:
                raise
            raise fault from exc

    call.__name__ = name
    return call


class _Block:
    """A guarded transaction: its opening and its commit fault as the storage's methods do."""

    def __init__(self, guarded: Guarded, name: str, block: AbstractContextManager[Any]) -> None:
        self.guarded, self.name, self.block = guarded, name, block

    def __enter__(self) -> Any:
        try:
            return self.block.__enter__()
        except Exception as exc:
            fault = self.guarded._fault(self.name, exc)
            if fault is None:
                raise
            raise fault from exc

    def __exit__(self, *exc_info: Any) -> Any:
        try:
            return self.block.__exit__(*exc_info)
        except Exception as exc:
            if exc is exc_info[1]:
                raise
            fault = self.guarded._fault(f"{self.name} (commit)", exc)
            if fault is None:
                raise
            raise fault from exc


def guard(storage: Any) -> Guarded:
    """``storage`` guarded for a delivery (itself if it is guarded already)."""
    return storage if isinstance(storage, Guarded) else Guarded(storage)


def unguarded(storage: Any) -> Any:
    """The storage itself, without its guard."""
    return storage.storage if isinstance(storage, Guarded) else storage


def retrying(storage: Any) -> AbstractContextManager[Any]:
    """Mark a transaction the caller retries on transient errors (nothing on an unguarded storage)."""
    return storage.retrying() if isinstance(storage, Guarded) else nullcontext()
