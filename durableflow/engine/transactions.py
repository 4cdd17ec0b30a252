"""The transaction a transactional step's body runs in, as the engine and the storages share it.

``ctx.step.transaction`` (``durableflow.engine.steps.transactions``) asks its storage for a
transaction scope (``Storage.transaction_scope()``), runs the body and writes the step's record
inside it, and lets it commit both or roll both back. What lives here is plain Python shared by
the step, the two storages and ``durableflow.dispatch``:

- ``Scope``: what ``transaction_scope()`` yields. A body (or a test double) reaches the open one
  with ``current()`` and registers ``on_rollback(fn)`` hooks, which run if the scope rolls back
  (the body raised, or the fenced write of the record was rejected).
- the refusals: a body must not do what its transaction cannot take back (send a task message,
  query another database alias). Whatever detects it calls ``refuse(code, message)``, which
  latches the error on the scope and returns a ``TransactionRefused`` to raise. A
  ``BaseException``: the body's ``except Exception`` cannot swallow it, and Celery's signal
  dispatch (which logs and drops a receiver's ``Exception``) lets it stop the publish; the latch
  fails the step even if the body catches it anyway.
- ``transient(exc)``: serialization failures and deadlocks (PostgreSQL SQLSTATE 40001 / 40P01)
  and SQLite's "database is locked", recognised without importing a driver, so that the step
  retries the whole transaction.
"""

from __future__ import annotations

from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any, Callable, Iterator

from durableflow import exceptions
from durableflow.engine import logs

__all__ = ["Scope", "TransactionRefused", "current", "entered", "refuse", "transient"]

logger = logs.logger("durableflow.transactions")

# SQLSTATEs worth retrying the whole transaction for: serialization_failure, deadlock_detected.
TRANSIENT_SQLSTATES = frozenset({"40001", "40P01"})
_SQLITE_BUSY = ("database is locked", "database table is locked")

_current: ContextVar[Scope | None] = ContextVar("durableflow_transaction_scope", default=None)


class TransactionRefused(BaseException):
    """A transactional step's body did something its transaction cannot include."""

    def __init__(self, error: exceptions.DurableflowError):
        super().__init__(str(error))
        self.error = error


class Scope:
    """One transactional step's open transaction, as its body sees it.

    ``alias`` names the database the transaction runs on (``"memory"`` for the in-memory
    storage). Hooks run in reverse order of registration, once, if the scope rolls back.
    """

    def __init__(self, alias: str):
        self.alias = alias
        self.key: str | None = None
        self.refusal: exceptions.DurableflowError | None = None
        self._rollback_hooks: list[Callable[[], Any]] = []

    def on_rollback(self, fn: Callable[[], Any]) -> None:
        """Call ``fn()`` if this transaction rolls back (undo a test double's writes)."""
        self._rollback_hooks.append(fn)

    def refuse(self, code: str, message: str) -> TransactionRefused:
        """Latch the first refusal (it fails the step however the body reacts) and return it to raise."""
        error = exceptions.WorkflowValueError(code, f"transactional step {self.key!r}: {message}", step=self.key)
        if self.refusal is None:
            self.refusal = error
        return TransactionRefused(error)

    def rolled_back(self) -> None:
        """The storage rolled the transaction back: run the hooks (each at most once)."""
        hooks, self._rollback_hooks = self._rollback_hooks[::-1], []
        for hook in hooks:
            try:
                hook()
            except Exception:  # one broken hook must not keep the others from undoing
                logger.exception("a rollback hook of transactional step %r failed", self.key)


def current() -> Scope | None:
    """The transaction scope of the transactional step whose body is running, or None."""
    return _current.get()


@contextmanager
def entered(scope: Scope) -> Iterator[Scope]:
    """Make ``scope`` the current one while a body runs."""
    token = _current.set(scope)
    try:
        yield scope
    finally:
        _current.reset(token)


def refuse(code: str, message: str) -> None:
    """Raise ``TransactionRefused`` if a transactional step's body is running; else nothing."""
    scope = _current.get()
    if scope is not None:
        raise scope.refuse(code, message)


def transient(exc: BaseException) -> bool:
    """Whether ``exc`` (or what caused it) says: run the whole transaction again.

    Duck-typed: psycopg errors carry ``sqlstate``; Django wraps driver errors and keeps the
    driver's as ``__cause__``; SQLite says "database is locked" when a writer held the file
    longer than its busy timeout.
    """
    seen: set[int] = set()
    error: BaseException | None = exc
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        if getattr(error, "sqlstate", None) in TRANSIENT_SQLSTATES:
            return True
        if getattr(error, "sqlite_errorname", None) == "SQLITE_BUSY":
            return True
        if type(error).__name__ == "OperationalError" and str(error).startswith(_SQLITE_BUSY):
            return True
        error = error.__cause__ or error.__context__
    return False
