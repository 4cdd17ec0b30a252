"""``ctx.step.run`` and ``ctx.step.poll``: a function's result, journaled once."""

from __future__ import annotations

from datetime import timedelta
from typing import Any, Callable

from durableflow import exceptions, values
from durableflow.engine.context import iso
from durableflow.engine.records import StepRecordData
from durableflow.engine.states import StepStatus
from durableflow.engine.steps.base import StepBase, apply_schema, started_at, validate
from durableflow.engine.timeouts import call_with_timeout
from durableflow.options import Retry

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
        """Run ``fn(*args, **kwargs)`` once and journal its result; replay returns the record."""
        ctx = self._ctx
        key, rest = ctx._key(args)
        if not rest or not callable(rest[0]):
            raise TypeError("ctx.step.run(key, fn, *args, **kwargs) needs a callable")
        fn, fn_args = rest[0], tuple(rest[1:])
        if compensate is not None or rate_limit is not None:
            _not_yet("compensate", compensate, "saga compensation")
            _not_yet("rate_limit", rate_limit, "rate limits")
        record = ctx._reach(key, "run")
        if record is not None and record.status == StepStatus.COMPLETED:
            return apply_schema(key, schema, record.value, record.meta.get("schema"))
        if queue is not None:
            if record is not None and record.status == StepStatus.FAILED:
                ctx._raise_recorded(record)
            return self._run_remote(key, record, fn, fn_args, kwargs, queue, retry, schema, timeout)
        if record is not None:
            self._resume(key, record)
        attempt = (record.attempts if record else 0) + 1
        exit_hook = ctx._settings.on_thread_exit
        started, result, error = self._attempt(
            key, lambda: call_with_timeout(fn, fn_args, kwargs, timeout, on_thread_exit=exit_hook)
        )
        if error is not None:
            return self._failed_attempt(key, record, attempt, error, retry, started)
        return self._succeeded(key, record, attempt, result, schema, started)

    def _succeeded(self, key, record, attempt, result, schema, started):
        ctx = self._ctx
        try:
            _, value = values.roundtrip(result, max_bytes=ctx._settings.max_payload_bytes)
        except exceptions.WorkflowValueError as exc:
            exc.message = f"step {key!r} returned a value that cannot be journaled: {exc.message}"
            return self._record_failure("run", key, record, attempt, exc, started)
        meta, ok, parsed = {}, True, value
        if schema is not None:
            ok, parsed = validate(key, schema, value)
            meta["schema"] = "accepted" if ok else "rejected"
        ctx._record_live(key, "run", value, attempts=attempt, meta=meta, started_at=started_at(record, started))
        if not ok:
            raise parsed
        return parsed

    def poll(self, *args: Any, interval: float, max_attempts: int) -> Any:
        """Call ``fn()`` every ``interval`` seconds (durably) until it returns a truthy value."""
        ctx = self._ctx
        key, rest = ctx._key(args)
        if len(rest) != 1 or not callable(rest[0]):
            raise TypeError("ctx.step.poll(key, fn, *, interval, max_attempts) needs a callable")
        if max_attempts < 1 or interval < 0:
            raise ValueError("poll needs max_attempts >= 1 and interval >= 0")
        fn = rest[0]
        record = ctx._reach(key, "poll")
        if record is not None:
            if record.status == StepStatus.COMPLETED:
                return record.value
            self._resume(key, record)
        attempt = (record.attempts if record else 0) + 1
        started, result, error = self._attempt(key, fn)
        if isinstance(error, exceptions.RetryableError):
            error = None  # "not yet", like a falsy answer
        if error is not None:
            return self._record_failure("poll", key, record, attempt, error, started)
        if result:
            try:
                _, value = values.roundtrip(result, max_bytes=ctx._settings.max_payload_bytes)
            except exceptions.WorkflowValueError as exc:
                return self._record_failure("poll", key, record, attempt, exc, started)
            ctx._record_live(key, "poll", value, attempts=attempt, started_at=started_at(record, started))
            return value
        if attempt >= max_attempts:
            timeout = exceptions.WaitTimeout(
                message=f"poll {key!r} found nothing truthy in {max_attempts} attempts", step=key
            )
            return self._record_failure("poll", key, record, attempt, timeout, started)
        until = ctx._journal.now() + timedelta(seconds=interval)
        ctx._write(
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
        raise ctx._suspend(until, {"kind": "poll", "step": key, "attempt": attempt, "until": iso(until)})


def _not_yet(name: str, value: Any, what: str) -> None:
    if value is not None:
        raise NotImplementedError(f"ctx.step.run({name}=...) is not available yet: {what} are not implemented")
