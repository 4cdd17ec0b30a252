"""``ctx.step.run`` and ``ctx.step.poll``: a function's result, journaled once."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta
from typing import Any, Callable

from durableflow import exceptions, values
from durableflow.engine import ratelimits
from durableflow.engine.context import iso
from durableflow.engine.records import LeaseLost, StepRecordData
from durableflow.engine.states import StepStatus
from durableflow.engine.steps.base import StepBase, apply_schema, started_at, validate
from durableflow.engine.timeouts import call_with_timeout
from durableflow.options import RateLimit, Retry

__all__ = ["RunSteps"]


class RunSteps(StepBase):
    def run(
        self,
        *args: Any,
        retry: Retry | None = None,
        schema: Any = None,
        compensate: Callable[[Any], Any] | None = None,
        rate_limit: Any = None,
        queue: str | None = None,
        timeout: float | None = None,
        **kwargs: Any,
    ) -> Any:
        """Run ``fn(*args, **kwargs)`` once and journal its result; replay returns the record.

        ``compensate=undo``: once the step completed, ``undo(result)`` is its compensation
        (``durableflow.engine.sagas``), run if the execution is cancelled, fails uncaught or
        calls ``ctx.compensate()``.

        ``rate_limit=RateLimit(key, limit, window)``: before its first attempt the step asks the
        limiter shared by every worker (``durableflow.engine.ratelimits``); over the limit, the
        execution waits durably until a unit frees. The admission is journaled with the step
        (``meta["admitted_at"]``): its retries and replays take no second unit.
        """
        delivery = self._delivery
        key, rest = delivery.key(args)
        if not rest or not callable(rest[0]):
            raise TypeError("ctx.step.run(key, fn, *args, **kwargs) needs a callable")
        fn, fn_args = rest[0], tuple(rest[1:])
        if compensate is not None and not callable(compensate):
            raise TypeError("ctx.step.run(..., compensate=fn) needs a callable taking the step's result")
        if rate_limit is not None and not isinstance(rate_limit, RateLimit):
            raise TypeError(f"ctx.step.run({key!r}, ..., rate_limit=...) needs a durableflow.RateLimit")
        result = self._run(key, fn, fn_args, kwargs, retry, schema, compensate is not None, queue, timeout, rate_limit)
        if compensate is not None:
            delivery.saga.register(key, compensate, result)
        return result

    def _run(self, key, fn, fn_args, kwargs, retry, schema, compensable, queue, timeout, rate_limit=None) -> Any:
        delivery = self._delivery
        record = delivery.reach(key, "run")
        if record is not None and record.status == StepStatus.COMPLETED:
            return apply_schema(key, schema, record.value, record.meta.get("schema"))
        carry: dict[str, Any] = {}
        if rate_limit is not None and (record is None or record.status != StepStatus.FAILED):
            record, carry = self._admitted(key, record, rate_limit, fn_args, kwargs)
        if compensable:
            delivery.mark_compensable()  # before the body runs: a cancel from now on will compensate
        if queue is not None:
            if record is not None and record.status == StepStatus.FAILED:
                delivery.raise_recorded(record)
            return self._run_remote(
                key, record, fn, fn_args, kwargs, queue, retry, schema, timeout, compensable, carry=carry
            )
        if record is not None:
            self._resume(key, record)
        attempt = (record.attempts if record else 0) + 1
        exit_hook = delivery.settings.on_thread_exit
        fn = self._stand_in("run", key, fn)
        started, result, error = self._attempt(
            key,
            lambda: call_with_timeout(fn, fn_args, kwargs, timeout, on_thread_exit=exit_hook),
            kind="run",
            attempt=attempt,
        )
        if error is not None:
            return self._failed_attempt(key, record, attempt, error, retry, started, carry=carry)
        return self._succeeded(key, record, attempt, result, schema, started, compensable, carry=carry)

    def _admitted(self, key, record, rate_limit, fn_args, kwargs) -> tuple[StepRecordData | None, dict[str, Any]]:
        """The step's admission by its rate limit: asked for once, before its first attempt.

        Returns the record to go on from and the meta its records carry from now on; suspends
        (``waiting_for.kind == "rate_limit"``) until a unit frees if the limiter refuses.
        """
        delivery = self._delivery
        if record is not None and "admitted_at" in record.meta:  # a retry or a replay: admitted before
            return record, {name: record.meta[name] for name in ("rate_limit", "admitted_at")}
        limiter = ratelimits.limiter_key(rate_limit, key, fn_args, kwargs)
        delivery.go_live()
        try:
            admitted, at = delivery.journal.admit(limiter, rate_limit.limit, rate_limit.window, rate_limit.units, key)
        except LeaseLost as interrupt:
            delivery.latch(interrupt)
            raise
        if admitted:
            if record is not None and "rate_limit" in record.meta:
                # The record of the wait for this admission is not an attempt: the first one starts now.
                record = replace(record, meta={})
            return record, {"rate_limit": limiter, "admitted_at": iso(at)}
        delivery.write(
            StepRecordData(
                key=key,
                kind="run",
                status=StepStatus.WAITING,
                attempts=record.attempts if record else 0,
                meta={"rate_limit": limiter, "until": iso(at)},
            ),
            new=record is None,
        )
        raise delivery.suspend(at, {"kind": "rate_limit", "step": key, "key": limiter, "until": iso(at)})

    def _succeeded(self, key, record, attempt, result, schema, started, compensable=False, *, carry=None):
        delivery = self._delivery
        try:
            _, value = values.roundtrip(result, max_bytes=delivery.settings.max_payload_bytes)
        except exceptions.WorkflowValueError as exc:
            exc.message = f"step {key!r} returned a value that cannot be journaled: {exc.message}"
            return self._record_failure("run", key, record, attempt, exc, started, carry=carry)
        meta, ok, parsed = dict(carry or {}), True, value
        if schema is not None:
            ok, parsed = validate(key, schema, value)
            meta["schema"] = "accepted" if ok else "rejected"
        if compensable and ok:  # a value its schema rejects is raised, and registers nothing
            meta["compensate"] = True
        delivery.record_live(key, "run", value, attempts=attempt, meta=meta, started_at=started_at(record, started))
        if not ok:
            raise parsed
        return parsed

    def poll(self, *args: Any, interval: float, max_attempts: int) -> Any:
        """Call ``fn()`` every ``interval`` seconds (durably) until it returns a truthy value."""
        delivery = self._delivery
        key, rest = delivery.key(args)
        if len(rest) != 1 or not callable(rest[0]):
            raise TypeError("ctx.step.poll(key, fn, *, interval, max_attempts) needs a callable")
        if max_attempts < 1 or interval < 0:
            raise ValueError("poll needs max_attempts >= 1 and interval >= 0")
        fn = rest[0]
        record = delivery.reach(key, "poll")
        if record is not None:
            if record.status == StepStatus.COMPLETED:
                return record.value
            self._resume(key, record)
        attempt = (record.attempts if record else 0) + 1
        started, result, error = self._attempt(
            key, fn, kind="poll", attempt=attempt, not_failures=(exceptions.RetryableError,)
        )
        if isinstance(error, exceptions.RetryableError):
            error = None  # "not yet", like a falsy answer
        if error is not None:
            return self._record_failure("poll", key, record, attempt, error, started)
        if result:
            try:
                _, value = values.roundtrip(result, max_bytes=delivery.settings.max_payload_bytes)
            except exceptions.WorkflowValueError as exc:
                return self._record_failure("poll", key, record, attempt, exc, started)
            delivery.record_live(key, "poll", value, attempts=attempt, started_at=started_at(record, started))
            return value
        if attempt >= max_attempts:
            timeout = exceptions.WaitTimeout(
                message=f"poll {key!r} found nothing truthy in {max_attempts} attempts", step=key
            )
            return self._record_failure("poll", key, record, attempt, timeout, started)
        until = delivery.journal.now() + timedelta(seconds=interval)
        delivery.write(
            StepRecordData(
                key=key,
                kind="poll",
                status=StepStatus.WAITING,
                attempts=attempt,
                meta={"until": iso(until)},
                started_at=started_at(record, started),
            ),
            new=record is None,
        )
        raise delivery.suspend(until, {"kind": "poll", "step": key, "attempt": attempt, "until": iso(until)})

