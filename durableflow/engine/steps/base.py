"""What every step method shares: one live attempt, durable retries, recorded failures."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, Callable

from durableflow import exceptions, values
from durableflow.engine import logs, tracing
from durableflow.engine.context import delivery_of, iso, parse_iso
from durableflow.engine.records import StepRecordData
from durableflow.engine.states import StepStatus
from durableflow.options import Retry

if TYPE_CHECKING:
    from durableflow.engine.context import Context

__all__ = ["StepBase", "started_at", "validate", "apply_schema"]


class StepBase:
    """The base of ``ctx.step``: holds the context; the step methods are mixed in."""

    def __init__(self, ctx: Context):
        self._ctx = ctx
        self._delivery = delivery_of(ctx)  # the engine's side of the delivery (engine/delivery.py)

    if TYPE_CHECKING:  # one part's steps end through another's (``durableflow.engine.steps.StepAPI``)

        def _run_remote(self, *args: Any, **kwargs: Any) -> Any: ...  # FanoutSteps: a body as its own task
        def _succeeded(self, *args: Any, **kwargs: Any) -> Any: ...  # RunSteps: record a body's result

    def _resume(self, key: str, record: StepRecordData) -> None:
        """A recorded, unfinished step: raise its recorded failure, or wait until its next attempt."""
        if record.status == StepStatus.FAILED:
            self._delivery.raise_recorded(record)
        self._wait_until_due(key, record)

    def _stand_in(self, kind: str, key: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        """The callable that runs as step ``key``'s body (``EngineSettings.step_body``)."""
        hook = self._delivery.settings.step_body
        return fn if hook is None else hook(kind, key, fn)

    def _attempt(
        self, key: str, call: Callable[[], Any], *, kind: str, attempt: int, not_failures: tuple[type, ...] = ()
    ) -> tuple[datetime, Any, Exception | None]:
        """One live attempt of a step body (its span, if tracing is on): ``(started, result, error)``.
        ``not_failures``: errors that are an answer, not a failure (a poll's "not yet")."""
        delivery = self._delivery
        delivery.go_live()
        started = delivery.journal.now()
        delivery.in_step = key
        try:
            # What the body logs names its step; what it traces is a child of the step's span.
            with logs.scope(step_key=key), tracing.step(delivery.journal.claimed, key, kind, attempt) as span:
                try:
                    return started, call(), None
                except Exception as exc:  # noqa: BLE001 - any error of the step's body is its outcome
                    if not isinstance(exc, not_failures):
                        tracing.failed(span, exc)
                    return started, None, exc
        finally:
            delivery.in_step = None

    def _failed_attempt(self, key, record, attempt, exc, retry, started, *, kind="run", exclusive=False, carry=None):
        """Record a failed attempt: waiting for the next one, or failed. ``carry``: meta every record of
        the step keeps (a rate-limit admission)."""
        ctx = self._ctx
        delivery = self._delivery
        if isinstance(exc, exceptions.RetryableError):
            policy = retry or Retry()
            max_attempts = exc.max_attempts or policy.max_attempts
            delay = exc.retry_interval if exc.retry_interval is not None else policy.delay(attempt)
        else:
            policy = retry or delivery.settings.default_retry
            max_attempts, delay = policy.max_attempts, policy.delay(attempt)
        if attempt >= max_attempts:
            return self._record_failure(kind, key, record, attempt, exc, started, exclusive=exclusive, carry=carry)
        now = delivery.journal.now()
        until = now + timedelta(seconds=delay)
        with logs.scope(step_key=key):
            ctx.logger.info("step %r attempt %d failed (%s); retrying in %.3g s", key, attempt, exc, delay)
        waiting = StepRecordData(
            key=key,
            kind=kind,
            status=StepStatus.WAITING,
            attempts=attempt,
            error=values.encode_error(exc),
            meta={**(carry or {}), "until": iso(until)},
            started_at=started_at(record, started),
        )
        self._store(waiting, record, exclusive)
        raise delivery.suspend(until, {"kind": "retry", "step": key, "attempt": attempt, "until": iso(until)})

    def _record_failure(self, kind, key, record, attempt, exc, started, *, exclusive=False, carry=None):
        """Record the step as failed and raise the recorded error into workflow code."""
        delivery = self._delivery
        failed = StepRecordData(
            key=key,
            kind=kind,
            status=StepStatus.FAILED,
            attempts=attempt,
            error=values.encode_error(exc),
            meta=dict(carry or {}),
            started_at=started_at(record, started),
            finished_at=delivery.journal.now(),
        )
        self._store(failed, record, exclusive)
        delivery.raise_recorded(failed, cause=exc)

    def _store(self, record: StepRecordData, previous: StepRecordData | None, exclusive: bool) -> None:
        """Write a step's record; ``exclusive``: only as the change from ``previous`` (transactional steps)."""
        if exclusive:
            self._delivery.write_exclusive(record, previous)
        else:
            self._delivery.write(record, new=previous is None)

    def _wait_until_due(self, key: str, record: StepRecordData) -> None:
        """A step waiting for its next attempt: suspend again if it is not due yet."""
        until = record.meta.get("until")
        if until and parse_iso(until) > self._delivery.journal.now():
            raise self._delivery.suspend(parse_iso(until), {"kind": "retry", "step": key, "until": until})


def started_at(record: StepRecordData | None, started: datetime) -> datetime:
    return record.started_at if record is not None and record.started_at is not None else started


def validate(key: str, schema: Any, value: Any) -> tuple[bool, Any]:
    """Validate with a pydantic model or TypeAdapter: ``(True, parsed)`` or ``(False, error)``."""
    from pydantic import TypeAdapter, ValidationError

    adapter = schema if isinstance(schema, TypeAdapter) else TypeAdapter(schema)
    try:
        return True, adapter.validate_python(value)
    except ValidationError as exc:
        problems = "; ".join(f"{'/'.join(str(p) for p in err['loc']) or '/'}: {err['msg']}" for err in exc.errors())
        return False, exceptions.WorkflowValueError(
            "STEP_SCHEMA_INVALID", f"step {key!r} value failed its schema: {problems}", step=key
        )


def apply_schema(key: str, schema: Any, value: Any, verdict: str | None) -> Any:
    """Validate on every replay too; a value rejected on the first run stays rejected."""
    if schema is None:
        return value
    ok, parsed = validate(key, schema, value)
    if not ok:
        raise parsed
    if verdict == "rejected":
        raise exceptions.WorkflowValueError(
            "STEP_SCHEMA_INVALID", f"step {key!r}: its schema rejected the value on the first run", step=key
        )
    return parsed
