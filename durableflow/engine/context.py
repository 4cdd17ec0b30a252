"""The workflow context: ``ctx`` and its step methods, replayed against a journal.

A delivery runs the workflow function from the top. Each step method looks its key up in
the journal loaded at claim time: a completed step returns its recorded value without
running; the first step without a record runs live and is written (one fenced write).
Suspending (a sleep, a durable retry) raises ``Suspend``, which ends the delivery.
"""

from __future__ import annotations

import logging
import random
import sys
import uuid
from collections import Counter
from datetime import datetime, timedelta, timezone
from typing import Any, Callable

from durableflow import exceptions, values
from durableflow.engine.journal import Journal
from durableflow.engine.records import Claim, LeaseLost, StepConflict, StepRecordData
from durableflow.engine.settings import EngineSettings
from durableflow.engine.states import StepStatus
from durableflow.engine.timeouts import call_with_timeout
from durableflow.options import Retry

__all__ = ["Context", "StepAPI", "Suspend"]

MAX_KEY_LENGTH = 255  # StepRecord.key


class Suspend(BaseException):
    """End the delivery: the execution waits for ``wake_at`` or to be woken."""

    def __init__(self, wake_at: datetime | None, waiting_for: dict[str, Any]):
        super().__init__(waiting_for.get("kind"))
        self.wake_at = wake_at
        self.waiting_for = waiting_for


def _iso(moment: datetime) -> str:
    return moment.astimezone(timezone.utc).isoformat()


def _parse(text: str) -> datetime:
    return datetime.fromisoformat(text)


class Context:
    """What a workflow function receives as ``ctx``."""

    def __init__(self, claim: Claim, journal: Journal, settings: EngineSettings):
        self.execution_id = claim.execution_id
        self.workflow = claim.workflow
        self.params = claim.params
        self.parent_id = claim.parent_id
        self.root_id = claim.root_id or claim.execution_id
        self.delivery = claim.delivery
        self.logger = logging.LoggerAdapter(
            logging.getLogger("durableflow.workflow"), {"execution_id": claim.execution_id}
        )
        self.step = StepAPI(self)
        self._journal = journal
        self._settings = settings
        self._records = claim.records
        self._seen: set[str] = set()
        self._sites: Counter[tuple[str, int]] = Counter()
        self._rng = random.Random(claim.execution_id)
        self._now_calls = 0
        self._in_step: str | None = None
        # Control flow the workflow code must not swallow: the first interrupt raised is
        # latched here and wins over whatever the code does with the exception.
        self.interrupt: BaseException | None = None

    # Deterministic helpers ------------------------------------------------------------

    def now(self) -> datetime:
        """The current time, journaled: a replay returns the time the first run saw."""
        self._now_calls += 1
        key = f"$now:{self._now_calls}"
        record = self._reach(key, "now")
        if record is None:
            record = self._record_live(key, "now", _iso(self._journal.now()), attempts=1)
        return _parse(record.value)

    def random(self) -> float:
        """A float in [0, 1), from a generator seeded by the execution id."""
        return self._rng.random()

    def uuid(self) -> uuid.UUID:
        """A UUID4 from the same seeded generator: the same on every replay."""
        return uuid.UUID(int=self._rng.getrandbits(128), version=4)

    # Engine internals (used by StepAPI) ----------------------------------------------

    def _latch(self, interrupt: BaseException) -> BaseException:
        if self.interrupt is None:
            self.interrupt = interrupt
        return interrupt

    def _key(self, args: tuple, depth: int = 2) -> tuple[str, tuple]:
        """Split an explicit key off ``args``, or derive one from the caller's line."""
        if args and isinstance(args[0], str):
            key = args[0]
            if not key:
                raise exceptions.WorkflowValueError("INVALID_STEP_KEY", "a step key must not be empty")
            if key.startswith("$"):
                raise exceptions.WorkflowValueError(
                    "INVALID_STEP_KEY", f"step key {key!r}: keys starting with '$' are reserved"
                )
            if len(key) > MAX_KEY_LENGTH:
                raise exceptions.WorkflowValueError(
                    "INVALID_STEP_KEY", f"step key {key[:40]!r}...: at most {MAX_KEY_LENGTH} characters"
                )
            return key, args[1:]
        frame = sys._getframe(depth)
        site = (frame.f_globals.get("__name__", "?"), frame.f_lineno)
        self._sites[site] += 1
        return f"{site[0]}:{site[1]}#{self._sites[site]}", args

    def _reach(self, key: str, kind: str) -> StepRecordData | None:
        """Mark ``key`` as reached in this delivery and return its record, if any."""
        if self.interrupt is not None:
            raise self.interrupt
        if self._in_step is not None:
            raise exceptions.WorkflowValueError(
                "NESTED_STEP", f"step {key!r} was called inside the body of step {self._in_step!r}"
            )
        if key in self._seen:
            raise exceptions.WorkflowValueError(
                "DUPLICATE_STEP_KEY",
                f"step key {key!r} was reached twice in execution {self.execution_id}; "
                "give each step a unique key (loops: include the index)",
            )
        self._seen.add(key)
        record = self._records.get(key)
        if record is not None and record.kind != kind:
            raise self._latch(
                exceptions.NonDeterminismError(
                    "NON_DETERMINISM",
                    f"Execution {self.execution_id} recorded step {key!r} as a {record.kind!r} step "
                    f"where a {kind!r} step was expected. Check that the workflow is deterministic "
                    "and was not changed under a running execution.",
                    step=key,
                )
            )
        return record

    def _go_live(self) -> None:
        """Before running anything live: stop if the lease is already known to be lost."""
        if self._journal.lease_lost():
            raise self._latch(LeaseLost(self.execution_id))

    def _write(self, record: StepRecordData, *, new: bool) -> StepRecordData:
        try:
            self._journal.write_step(record, new=new)
        except (LeaseLost, StepConflict) as interrupt:
            self._latch(interrupt)
            raise
        self._records[record.key] = record
        return record

    def _record_live(self, key: str, kind: str, value: Any, *, attempts: int, **fields: Any) -> StepRecordData:
        now = self._journal.now()
        fields.setdefault("started_at", now)
        record = StepRecordData(
            key=key, kind=kind, status=StepStatus.COMPLETED, attempts=attempts, value=value, finished_at=now, **fields
        )
        return self._write(record, new=key not in self._records)

    def _suspend(self, wake_at: datetime | None, waiting_for: dict[str, Any]) -> Suspend:
        return self._latch(Suspend(wake_at, waiting_for))  # type: ignore[return-value]

    def _raise_recorded(self, record: StepRecordData, cause: BaseException | None = None):
        error = values.decode_error(record.error or {})
        try:
            error.__durableflow_step__ = record.key  # type: ignore[attr-defined]
        except AttributeError:
            pass
        raise error from cause


class StepAPI:
    """``ctx.step``: every method takes a step key first (or derives one from the call site)."""

    def __init__(self, ctx: Context):
        self._ctx = ctx

    # run -------------------------------------------------------------------------------

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
        if compensate is not None or rate_limit is not None or queue is not None:
            _not_yet("compensate", compensate, "saga compensation")
            _not_yet("rate_limit", rate_limit, "rate limits")
            _not_yet("queue", queue, "steps on their own queue")
        record = ctx._reach(key, "run")
        if record is not None:
            if record.status == StepStatus.COMPLETED:
                return _apply_schema(key, schema, record.value, record.meta.get("schema"))
            self._resume(key, record)
        attempt = (record.attempts if record else 0) + 1
        started, result, error = self._attempt(key, lambda: call_with_timeout(fn, fn_args, kwargs, timeout))
        if error is not None:
            return self._failed_attempt(key, record, attempt, error, retry, started)
        return self._succeeded(key, record, attempt, result, schema, started)

    def _resume(self, key: str, record: StepRecordData) -> None:
        """A recorded, unfinished step: raise its recorded failure, or wait until its next attempt."""
        if record.status == StepStatus.FAILED:
            self._ctx._raise_recorded(record)
        self._wait_until_due(key, record)

    def _attempt(self, key: str, call: Callable[[], Any]) -> tuple[datetime, Any, Exception | None]:
        """One live attempt of a step body: ``(started, result, error)``."""
        ctx = self._ctx
        ctx._go_live()
        started = ctx._journal.now()
        ctx._in_step = key
        try:
            return started, call(), None
        except Exception as exc:
            return started, None, exc
        finally:
            ctx._in_step = None

    def _succeeded(self, key, record, attempt, result, schema, started):
        ctx = self._ctx
        try:
            _, value = values.roundtrip(result, max_bytes=ctx._settings.max_payload_bytes)
        except exceptions.WorkflowValueError as exc:
            exc.message = f"step {key!r} returned a value that cannot be journaled: {exc.message}"
            return self._record_failure("run", key, record, attempt, exc, started)
        meta, ok, parsed = {}, True, value
        if schema is not None:
            ok, parsed = _validate(key, schema, value)
            meta["schema"] = "accepted" if ok else "rejected"
        ctx._record_live(key, "run", value, attempts=attempt, meta=meta, started_at=_started(record, started))
        if not ok:
            raise parsed
        return parsed

    def _failed_attempt(self, key, record, attempt, exc, retry, started):
        ctx = self._ctx
        if isinstance(exc, exceptions.RetryableError):
            policy = retry or Retry()
            max_attempts = exc.max_attempts or policy.max_attempts
            delay = exc.retry_interval if exc.retry_interval is not None else policy.delay(attempt)
        else:
            policy = retry or ctx._settings.default_retry
            max_attempts, delay = policy.max_attempts, policy.delay(attempt)
        if attempt >= max_attempts:
            return self._record_failure("run", key, record, attempt, exc, started)
        now = ctx._journal.now()
        until = now + timedelta(seconds=delay)
        ctx.logger.info("step %r attempt %d failed (%s); retrying in %.3g s", key, attempt, exc, delay)
        waiting = StepRecordData(
            key=key,
            kind="run",
            status=StepStatus.WAITING,
            attempts=attempt,
            error=values.encode_error(exc),
            meta={"until": _iso(until)},
            started_at=_started(record, started),
        )
        ctx._write(waiting, new=record is None)
        raise ctx._suspend(until, {"kind": "retry", "step": key, "attempt": attempt, "until": _iso(until)})

    def _record_failure(self, kind, key, record, attempt, exc, started):
        """Record the step as failed and raise the recorded error into workflow code."""
        ctx = self._ctx
        failed = StepRecordData(
            key=key,
            kind=kind,
            status=StepStatus.FAILED,
            attempts=attempt,
            error=values.encode_error(exc),
            started_at=_started(record, started),
            finished_at=ctx._journal.now(),
        )
        ctx._write(failed, new=record is None)
        ctx._raise_recorded(failed, cause=exc)

    def _wait_until_due(self, key: str, record: StepRecordData) -> None:
        """A step waiting for its next attempt: suspend again if it is not due yet."""
        until = record.meta.get("until")
        if until and _parse(until) > self._ctx._journal.now():
            raise self._ctx._suspend(_parse(until), {"kind": "retry", "step": key, "until": until})

    # timers ----------------------------------------------------------------------------

    def sleep(self, *args: Any) -> None:
        """``sleep(key, seconds)``: a durable timer; no worker is held while it runs."""
        ctx = self._ctx
        key, rest = ctx._key(args)
        if len(rest) != 1 or isinstance(rest[0], bool) or not isinstance(rest[0], (int, float)) or rest[0] < 0:
            raise TypeError("ctx.step.sleep(key, seconds) needs a non-negative number of seconds")
        self._timer(key, lambda now: now + timedelta(seconds=rest[0]))

    def sleep_until(self, *args: Any) -> None:
        """``sleep_until(key, when)``: a durable timer until an aware datetime."""
        ctx = self._ctx
        key, rest = ctx._key(args)
        if len(rest) != 1 or not isinstance(rest[0], datetime) or rest[0].tzinfo is None:
            raise TypeError("ctx.step.sleep_until(key, when) needs a timezone-aware datetime")
        self._timer(key, lambda now: rest[0])

    def _timer(self, key: str, due: Callable[[datetime], datetime]) -> None:
        ctx = self._ctx
        record = ctx._reach(key, "sleep")
        if record is not None and record.status == StepStatus.COMPLETED:
            return None
        now = ctx._journal.now()
        if record is None:
            ctx._go_live()
            until = due(now)
            if until <= now:
                ctx._record_live(key, "sleep", None, attempts=1, meta={"until": _iso(until)})
                return None
            ctx._write(
                StepRecordData(
                    key=key, kind="sleep", status=StepStatus.WAITING, meta={"until": _iso(until)}, started_at=now
                ),
                new=True,
            )
        else:
            until = _parse(record.meta["until"])
            if until <= now:
                ctx._go_live()
                ctx._record_live(key, "sleep", None, attempts=1, meta=record.meta, started_at=record.started_at)
                return None
        raise ctx._suspend(until, {"kind": "timer", "step": key, "until": _iso(until)})

    # poll ------------------------------------------------------------------------------

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
            ctx._record_live(key, "poll", value, attempts=attempt, started_at=_started(record, started))
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
                meta={"until": _iso(until)},
                started_at=_started(record, started),
            ),
            new=record is None,
        )
        raise ctx._suspend(until, {"kind": "poll", "step": key, "attempt": attempt, "until": _iso(until)})


def _started(record: StepRecordData | None, started: datetime) -> datetime:
    return record.started_at if record is not None and record.started_at is not None else started


def _not_yet(name: str, value: Any, what: str) -> None:
    if value is not None:
        raise NotImplementedError(f"ctx.step.run({name}=...) is not available yet: {what} are not implemented")


def _validate(key: str, schema: Any, value: Any) -> tuple[bool, Any]:
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


def _apply_schema(key: str, schema: Any, value: Any, verdict: str | None) -> Any:
    """Validate on every replay too; a value rejected on the first run stays rejected."""
    if schema is None:
        return value
    ok, parsed = _validate(key, schema, value)
    if not ok:
        raise parsed
    if verdict == "rejected":
        raise exceptions.WorkflowValueError(
            "STEP_SCHEMA_INVALID", f"step {key!r}: its schema rejected the value on the first run", step=key
        )
    return parsed
