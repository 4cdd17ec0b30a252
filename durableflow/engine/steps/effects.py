"""``ctx.step.effect``: an external operation, at most once in effect.

One attempt of the protocol, in the delivery: begin → perform, or begin (pending) → lookup →
settle / perform / watch. The effect's state lives in its ``Effect`` row (the verbs in
``durableflow.engine.effects``), shared by every execution naming the same effect id; the
step's journal record holds what this execution got.

- A **settled** effect gives its result without a call, to every execution that asks.
- Before every ``lookup`` and ``perform`` the delivery **holds** the effect: one fenced
  write that matches only while its lease is still held, in the database. A delivery that
  lost its lease makes no call; one that meets another delivery mid-call waits instead.
- An **uncertain** outcome (``perform`` raised, ``lookup`` said ``unknown`` or raised)
  parks the step: the execution waits ``retry_in`` seconds (a ``wake_at`` the sweep
  honours; no worker is held) and looks the effect up again. A settle by another execution
  wakes it earlier.
- A request that does not match the known effect, or an invalid descriptor, is recorded at
  the step as ``WorkflowEffectError`` and raised into workflow code (catchable, not retried).
- A malformed lookup answer or a result that is not a durable value fails the run at the
  step with ``EffectDeliveryError`` (workflow code cannot swallow it); nothing is settled,
  and ``durableflow.retry()`` resumes with a lookup once the code is fixed.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any, Callable

from durableflow import exceptions, values
from durableflow.engine import effects
from durableflow.engine.context import iso, parse_iso
from durableflow.engine.effects import EffectRequest, effect_request, effect_result, read_lookup
from durableflow.engine.records import LeaseLost, StepRecordData
from durableflow.engine.states import StepStatus
from durableflow.engine.steps.base import StepBase, started_at

__all__ = ["EffectSteps"]

KIND = "effect"


class EffectSteps(StepBase):
    def effect(
        self,
        key: str,
        *,
        effect_id: str,
        operation: str,
        input: Any,  # noqa: A002 - the step's argument, as users write it
        retry_in: float,
        lookup: Callable[[str], Any],
        perform: Callable[[str], Any],
    ) -> Any:
        """Perform an external operation at most once in effect; return its result.

        ``lookup(effect_id)`` answers ``{"status": "settled", "result": r}``,
        ``{"status": "not-found"}`` (no call exists or can still finish) or
        ``{"status": "unknown"}``; ``perform(effect_id)`` returns the result (a durable value).
        """
        ctx = self._ctx
        delivery = self._delivery
        if not isinstance(key, str):
            raise TypeError("ctx.step.effect(key, *, effect_id=..., ...) needs a step key")
        key, _ = delivery.key((key,))
        replayed = delivery.replayed(key, KIND)
        if replayed.done:
            return replayed.value
        record = replayed.record
        delivery.go_live()
        if delivery.engine is None:
            raise RuntimeError("ctx.step.effect needs the engine's verbs: deliver through Engine.deliver()")
        started = delivery.journal.now()
        attempts = record.attempts if record is not None else 0
        try:
            request = effect_request(
                effect_id, operation, input, retry_in, lookup, perform, max_bytes=delivery.settings.max_payload_bytes
            )
        except exceptions.WorkflowEffectError as exc:
            return self._record_failure(KIND, key, record, attempts, exc, started)
        begun = delivery.engine.begin_effect(request, ctx.execution_id, key)
        if begun.status == effects.MISMATCH:
            mismatch = exceptions.WorkflowEffectError(
                "EFFECT_REQUEST_MISMATCH",
                f"effect {request.effect_id!r} is known with another operation or input than step {key!r} asks "
                f"for ({request.operation!r}); an effect id names one operation: use a new id for a new one",
            )
            return self._record_failure(KIND, key, record, attempts, mismatch, started)
        if begun.status == effects.SETTLED:
            return self._done(key, record, request, attempts, begun.result, started, "reused")
        if begun.status == effects.PENDING and record is not None:
            until = record.meta.get("until")
            if until and parse_iso(until) > delivery.journal.now():
                # Woken before its time, and not by a settle: keep waiting, without a call.
                return self._park(key, record, request, attempts, started, until=parse_iso(until))
        first_call = "perform" if begun.status == effects.NEW else "lookup"
        return self._attempts(key, record, request, attempts, started, first_call)

    def _attempts(self, key, record, request: EffectRequest, attempts: int, started: datetime, call: str) -> Any:
        """Hold, call, and settle or park: a lookup may lead to a perform in the same delivery."""
        ctx = self._ctx
        delivery = self._delivery
        max_bytes = delivery.settings.max_payload_bytes
        while True:
            delivery.go_live()
            held, standing = delivery.engine.hold_effect(request.effect_id, ctx.execution_id, delivery.journal.token)
            if held == effects.SETTLED:
                return self._done(key, record, request, attempts, standing, started, "reused")
            if held == effects.LOST:
                raise delivery.latch(LeaseLost(ctx.execution_id))
            if held == effects.BUSY:
                return self._park(key, record, request, attempts, started, reason="held by another delivery")
            attempts += 1
            fn = request.lookup if call == "lookup" else self._stand_in("effect", key, request.perform)
            _, answer, error = self._attempt(key, lambda: fn(request.effect_id), kind="effect", attempt=attempts)
            if error is not None:
                return self._park(key, record, request, attempts, started, reason=f"{call} raised", error=error)
            try:
                if call == "perform":
                    result = effect_result(request.effect_id, answer, call, max_bytes=max_bytes)
                    status = effects.SETTLED
                else:
                    status, result = read_lookup(request.effect_id, answer, max_bytes=max_bytes)
            except exceptions.EffectDeliveryError as exc:
                raise self._fail_delivery(key, record, request, attempts, exc, started) from None
            if status == effects.SETTLED:
                standing = delivery.engine.settle_effect(request.effect_id, result, ctx.execution_id)
                how = "performed" if call == "perform" else "looked up"
                return self._done(key, record, request, attempts, standing, started, how)
            if status == effects.UNKNOWN:
                return self._park(key, record, request, attempts, started, reason="lookup answered unknown")
            call = "perform"  # not-found: no call exists or can still finish

    def _done(self, key, record, request: EffectRequest, attempts, value, started, how: str) -> Any:
        self._delivery.record_live(
            key,
            KIND,
            value,
            attempts=attempts,
            meta={"effect_id": request.effect_id, "settled": how},
            started_at=started_at(record, started),
        )
        return value

    def _park(self, key, record, request: EffectRequest, attempts, started, *, until=None, reason="", error=None):
        """Wait ``retry_in`` seconds (or until the effect settles), watching the effect."""
        ctx = self._ctx
        delivery = self._delivery
        if until is None:
            until = delivery.journal.now() + timedelta(seconds=request.retry_in)
            ctx.logger.info(
                "effect %r of step %r is uncertain (%s%s); looking it up again in %g s",
                request.effect_id,
                key,
                reason,
                f": {error}" if error is not None else "",
                request.retry_in,
            )
            waiting = StepRecordData(
                key=key,
                kind=KIND,
                status=StepStatus.WAITING,
                attempts=attempts,
                error=None if error is None else values.encode_error(error),
                meta={"effect_id": request.effect_id, "until": iso(until), "reason": reason},
                started_at=started_at(record, started),
            )
            delivery.write(waiting, new=record is None)
        engine, execution_id, token = delivery.engine, ctx.execution_id, delivery.journal.token
        raise delivery.suspend(
            until,
            {"kind": "effect", "step": key, "effect_id": request.effect_id, "until": iso(until)},
            guard=lambda: engine.watch_effect(request.effect_id, execution_id, key, token),
        )

    def _fail_delivery(self, key, record, request: EffectRequest, attempts, exc, started) -> BaseException:
        """Record the failure and latch it: the run fails at this step whatever workflow code does."""
        delivery = self._delivery
        exc.__durableflow_step__ = key
        failed = StepRecordData(
            key=key,
            kind=KIND,
            status=StepStatus.FAILED,
            attempts=attempts,
            error=values.encode_error(exc),
            meta={"effect_id": request.effect_id},
            started_at=started_at(record, started),
            finished_at=delivery.journal.now(),
        )
        delivery.write(failed, new=record is None)
        return delivery.latch(exc)
