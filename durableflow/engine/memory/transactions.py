"""Transactional steps in memory: the same all-or-nothing as the database, for unit tests.

``transaction_scope()`` is ``atomic()`` (the tables are copied on entry and put back if the
block raises, the lock is held throughout) with a ``Scope`` whose rollback hooks run when it
rolls back. A body's writes to the project's models do not exist in memory, so test doubles
take part through those hooks: ``MemoryTable`` is a ready-made one (a dict whose changes made
inside a transactional step's body are undone if the step rolls back); any other double can
call ``durableflow.testing.current_transaction().on_rollback(undo)``.
"""

from __future__ import annotations

import contextlib
import copy
import weakref
from collections.abc import MutableMapping
from typing import Any, Iterator

from durableflow.engine import faults, transactions
from durableflow.engine.memory.core import MemoryCore
from durableflow.engine.transactions import Scope

__all__ = ["MemoryTransactions", "MemoryTable"]


class MemoryTransactions(MemoryCore):
    """``transaction_scope``, ``is_transient`` and the faults in memory (a part of ``InMemoryStorage``)."""

    @contextlib.contextmanager
    def transaction_scope(self) -> Iterator[Scope]:
        scope = Scope("memory")
        try:
            with self.atomic():
                yield scope
        except BaseException:
            scope.rolled_back()
            raise

    def is_transient(self, exc: BaseException) -> bool:
        # A double may raise a driver's error (psycopg's SerializationFailure carries sqlstate
        # 40001) to show that the step runs the transaction again.
        return transactions.transient(exc)

    def is_fault(self, exc: BaseException) -> bool:
        # Nothing in memory fails so; a double may raise a driver's error to stand for the database.
        return faults.is_fault(exc)

    def reset(self) -> None:
        pass  # no connection to drop


class MemoryTable(MutableMapping):
    """A dict for test doubles that rolls back with the transactional step that changed it.

    The first time a transactional step's body touches the table (reads included: a value read
    may be changed in place), the table keeps a deep copy of its contents and puts it back if
    that step's transaction rolls back. Outside a body it is a plain dict.

        orders = MemoryTable({7: {"paid": False}})

        def mark_paid(order_id):
            orders[order_id]["paid"] = True
    """

    def __init__(self, *args: Any, **kwargs: Any):
        self._data: dict[Any, Any] = dict(*args, **kwargs)
        self._saved_for: weakref.WeakSet[Scope] = weakref.WeakSet()

    def _touch(self) -> dict[Any, Any]:
        scope = transactions.current()
        if scope is not None and scope not in self._saved_for:
            self._saved_for.add(scope)
            saved = copy.deepcopy(self._data)
            scope.on_rollback(lambda: self._restore(saved))
        return self._data

    def _restore(self, saved: dict[Any, Any]) -> None:
        self._data.clear()
        self._data.update(saved)

    def __getitem__(self, key: Any) -> Any:
        return self._touch()[key]

    def __setitem__(self, key: Any, value: Any) -> None:
        self._touch()[key] = value

    def __delitem__(self, key: Any) -> None:
        del self._touch()[key]

    def __iter__(self) -> Iterator[Any]:
        return iter(list(self._touch()))

    def __len__(self) -> int:
        return len(self._touch())

    def __repr__(self) -> str:
        return f"MemoryTable({self._data!r})"
