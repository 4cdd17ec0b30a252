"""``ctx.step.transaction``: a body's database writes and its record, committed together.

The storage opens one transaction on the database that holds the journal
(``Storage.transaction_scope()``); the body runs in it, then the step's record is written in
it by the same fenced statement a ``run`` step uses; the commit makes both durable. Whatever
goes wrong before the commit rolls both back: the body raised, its value cannot be journaled,
it did something the transaction cannot take back (a refusal), or the fenced write matched
nothing because another delivery holds the lease or recorded the step first.

Concurrency: any number of deliveries of one execution may run the body at once (a zombie
whose lease was taken over, a duplicate message). Each runs it in its own transaction and
only a transaction whose fenced write inserted the record (or moved it on from the status
this delivery read) commits; the others roll back, so the body's writes commit exactly once.
Two racing inserts of one key meet at the journal's unique (execution, key) constraint, and
the loser rolls back even when it would have recorded the same value.
"""

from __future__ import annotations

import inspect
import itertools
import random
import time
from typing import Any, Callable

from durableflow import exceptions, values
from durableflow.engine import faults, tracing, transactions
from durableflow.engine.records import StepRecordData
from durableflow.engine.states import StepStatus
from durableflow.engine.steps.base import StepBase, apply_schema, started_at, validate
from durableflow.options import Retry

__all__ = ["TransactionSteps"]

KIND = "transaction"


class _RolledBack(Exception):
    """Raised inside the scope to roll it back; ``final``: record the error without retries."""

    def __init__(self, error: BaseException, *, final: bool):
        super().__init__(str(error))
        self.error = error
        self.final = final


class TransactionSteps(StepBase):
    # A transaction that fails with a serialization failure, a deadlock or a busy database is
    # run again at once (after a full-jitter back-off from 5 ms, doubling, at most 1 s) up to
    # this many times in all; only then does the attempt count as failed (a durable retry).
    transient_tries = 8
    transient_backoff = (0.005, 1.0)

    def transaction(self, *args: Any, retry: Retry | None = None, schema: Any = None, **kwargs: Any) -> Any:
        """Run ``fn(*args, **kwargs)`` in one database transaction with the step's record.

        The body's writes through durableflow's database alias commit exactly once, with the
        record; a failing or fenced-out attempt rolls them back. Replay returns the recorded
        value without calling ``fn``.
        """
        ctx = self._ctx
        delivery = self._delivery
        if not args or not isinstance(args[0], str):
            raise TypeError("ctx.step.transaction(key, fn, *args, **kwargs) needs a step key first")
        key, rest = delivery.key(args)
        if not rest or not callable(rest[0]):
            raise TypeError("ctx.step.transaction(key, fn, *args, **kwargs) needs a callable")
        fn, fn_args = rest[0], tuple(rest[1:])
        record = delivery.reach(key, KIND)
        if record is not None:
            if record.status == StepStatus.COMPLETED:
                return apply_schema(key, schema, record.value, record.meta.get("schema"))
            self._resume(key, record)
        if _is_async(fn):
            raise exceptions.WorkflowValueError(
                "TRANSACTION_ASYNC_BODY",
                f"transactional step {key!r}: its body {_name(fn)} is a coroutine function; a database "
                "transaction cannot wait on an event loop. Give it a plain (sync) function.",
                step=key,
            )
        attempt = (record.attempts if record else 0) + 1
        delivery.go_live()
        started = delivery.journal.now()
        storage = delivery.journal.storage
        for tries in itertools.count(1):
            # A span per try: the body, its record and the commit (a try rolled back by a conflict
            # and run again at once is a span of its own).
            with tracing.step(delivery.journal.claimed, key, KIND, attempt) as span:
                try:
                    # A transient error of the record's write or of the commit comes out as it is, to
                    # be run again here; any other database failure ends the delivery (StorageFault).
                    with faults.retrying(storage):
                        return self._commit(key, record, attempt, fn, fn_args, kwargs, schema, started)
                except _RolledBack as rolled:
                    error, final = rolled.error, rolled.final
                except Exception as exc:  # noqa: BLE001 - the record's write or the commit itself failed
                    error, final = exc, False
                tracing.failed(span, error)
            if final:
                return self._record_failure(KIND, key, record, attempt, error, started, exclusive=True)
            if storage.is_transient(error):
                if tries < self.transient_tries:
                    delay = random.uniform(0, min(self.transient_backoff[1], self.transient_backoff[0] * 2**tries))
                    ctx.logger.info(
                        "transactional step %r: %s; running the transaction again in %.3f s (try %d of %d)",
                        key,
                        error,
                        delay,
                        tries + 1,
                        self.transient_tries,
                    )
                    time.sleep(delay)
                    delivery.go_live()
                    continue
                conflict = exceptions.RetryableError(
                    f"the transaction kept failing after {tries} tries: {error}", code="TRANSACTION_CONFLICT"
                )
                conflict.__cause__ = error
                error = conflict
            return self._failed_attempt(key, record, attempt, error, retry, started, kind=KIND, exclusive=True)
        raise AssertionError("unreachable")  # pragma: no cover

    def _commit(self, key, record, attempt, fn, fn_args, kwargs, schema, started) -> Any:
        """One try: the body and the record in one transaction; raises ``_RolledBack`` to undo it."""
        delivery = self._delivery
        with delivery.journal.storage.transaction_scope() as scope:
            scope.key = key
            result, error = self._body(scope, key, self._stand_in("transaction", key, fn), fn_args, kwargs)
            if scope.refusal is not None:  # latched: the body may have caught the refusal
                raise _RolledBack(scope.refusal, final=True)
            if error is not None:
                raise _RolledBack(error, final=_is_misuse(error))
            if inspect.isawaitable(result):
                if inspect.iscoroutine(result):
                    result.close()  # never awaited: no "never awaited" warning
                raise _RolledBack(
                    exceptions.WorkflowValueError(
                        "TRANSACTION_ASYNC_BODY",
                        f"transactional step {key!r}: its body {_name(fn)} returned an awaitable; a "
                        "database transaction cannot wait on an event loop. Give it a plain (sync) function.",
                        step=key,
                    ),
                    final=True,
                )
            try:
                _, value = values.roundtrip(result, max_bytes=delivery.settings.max_payload_bytes)
            except exceptions.WorkflowValueError as exc:
                exc.message = f"step {key!r} returned a value that cannot be journaled: {exc.message}"
                raise _RolledBack(exc, final=True) from None
            meta, parsed = {}, value
            if schema is not None:
                ok, parsed = validate(key, schema, value)
                if not ok:  # its writes roll back: a transaction commits only a value it stands by
                    raise _RolledBack(parsed, final=True)
                meta["schema"] = "accepted"
            completed = StepRecordData(
                key=key,
                kind=KIND,
                status=StepStatus.COMPLETED,
                attempts=attempt,
                value=value,
                meta=meta,
                started_at=started_at(record, started),
                finished_at=delivery.journal.now(),
            )
            delivery.write_exclusive(completed, record)
        return parsed

    def _body(self, scope, key, fn, fn_args, kwargs) -> tuple[Any, BaseException | None]:
        delivery = self._delivery
        delivery.in_step = key  # another step called from the body raises NESTED_STEP
        try:
            with transactions.entered(scope):
                return fn(*fn_args, **kwargs), None
        except transactions.TransactionRefused as refused:
            return None, refused.error
        except Exception as exc:  # noqa: BLE001 - any error of the body is its outcome
            return None, exc
        finally:
            delivery.in_step = None


def _is_misuse(error: BaseException) -> bool:
    """Errors that another attempt cannot fix: recorded at once, not retried."""
    return isinstance(error, exceptions.WorkflowValueError) and error.code == "NESTED_STEP"


def _is_async(fn: Callable[..., Any]) -> bool:
    call = getattr(fn, "__call__", None)  # noqa: B004 - an object whose __call__ is async
    return any(inspect.iscoroutinefunction(f) or inspect.isasyncgenfunction(f) for f in (fn, call) if f is not None)


def _name(fn: Callable[..., Any]) -> str:
    return getattr(fn, "__qualname__", None) or repr(fn)
