"""Transactional steps on the ORM: one ``transaction.atomic`` on the alias of durableflow's tables.

The body's ORM writes and the step's fenced record share that transaction only if they go
through the same connection, so while the scope is open every other configured alias refuses
queries (``TRANSACTION_WRONG_ALIAS``, naming the alias): a write there would commit or roll back
on its own. ``atomic()`` blocks the body opens nest as savepoints; inside a caller's
transaction (a test's) the whole scope is a savepoint.

Sending a task message from the body is refused too (``durableflow.dispatch``): a message sent
from a transaction that then rolls back cannot be taken back. ``transaction.on_commit`` and
Celery's ``delay_on_commit`` run after the commit, outside the body, and are the way to send.
"""

from __future__ import annotations

from contextlib import ExitStack, contextmanager
from typing import Iterator

from django.db import connections, transaction

from durableflow.engine import faults, transactions
from durableflow.engine.transactions import Scope
from durableflow.orm import backend
from durableflow.orm.core import OrmCore

__all__ = ["OrmTransactions"]


class OrmTransactions(OrmCore):
    """``transaction_scope``, ``is_transient`` and the faults on the ORM (a part of ``OrmStorage``)."""

    alias: str

    @contextmanager
    def transaction_scope(self) -> Iterator[Scope]:
        scope = Scope(self.alias)
        try:
            # The guards come off (inner) before the commit (outer), so that on_commit
            # callbacks the body registered run unguarded.
            with transaction.atomic(using=self.alias), ExitStack() as guards:
                for alias in connections:
                    if alias != self.alias:
                        guards.enter_context(connections[alias].execute_wrapper(_OtherAlias(scope, alias, self.alias)))
                yield scope
        except BaseException:
            scope.rolled_back()
            raise

    def is_transient(self, exc: BaseException) -> bool:
        # psycopg's errors carry the SQLSTATE (Django keeps them as __cause__); SQLite says
        # "database is locked" once its busy timeout passed.
        return transactions.transient(exc)

    def is_fault(self, exc: BaseException) -> bool:
        # Django's wrappers of the driver's errors, and the driver's own (a cursor of durableflow's
        # raises psycopg's where Django's wrapper is not in the way).
        return faults.is_fault(exc)

    def reset(self) -> None:
        connection = connections[self.alias]
        if not backend.in_transaction(connection):  # a caller's transaction (a test's) ends with its owner
            connection.close()


class _OtherAlias:
    """An execute wrapper on another alias's connection: refuses every query while the body runs."""

    def __init__(self, scope: Scope, alias: str, home: str):
        self.scope, self.alias, self.home = scope, alias, home

    def __call__(self, execute, sql, params, many, context):
        statement = " ".join(str(sql).split()[:3])
        raise self.scope.refuse(
            code="TRANSACTION_WRONG_ALIAS",
            message=f"the body ran a query ({statement} ...) on database alias {self.alias!r}, but its transaction "
            f"is on {self.home!r}, the alias of durableflow's tables: that query would commit or roll back "
            f"on its own. Send the body's models to {self.home!r} (DATABASE_ROUTERS, or .using({self.home!r})), "
            "or do that work in a ctx.step.run step.",
        )
