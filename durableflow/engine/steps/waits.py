"""``ctx.step.wait_for_event``, ``wait_for_signal``, ``wait_for_token``: waits for the world.

A wait is a journal record (waiting, then completed with the payload or failed with
``WaitTimeout``) and a ``Waiter`` row registered in the same transaction. Its delivery then
looks for what satisfies it (see ``durableflow.engine.waits`` for why registering first and
looking second never misses an event) and suspends if nothing does: the execution waits
without a worker until a publisher wakes it, or the sweep does at its deadline. Which of the
two happened is decided from the waiter's row: a conditional write closes it at the
deadline only if nothing satisfied it first.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any, Callable

from durableflow import exceptions, values
from durableflow.engine.context import iso, parse_iso
from durableflow.engine.records import StepRecordData
from durableflow.engine.states import StepStatus, WaiterStatus
from durableflow.engine.steps.base import StepBase
from durableflow.engine.storage import NOW
from durableflow.engine.waits import EVENT, MAX_TOKEN, SIGNAL, TOKEN, check_name, satisfy

__all__ = ["WaitSteps", "PENDING"]

W = WaiterStatus
PENDING: Any = object()  # a check's answer: not satisfied yet

# A check looks at the waiter (and what it waits for): PENDING, or (value, extra meta), or
# raises the error to record at the step.
Check = Callable[[Any], Any]


class WaitSteps(StepBase):
    def wait_for_event(self, key: str, event_type: str, *, match: Any = None, timeout: float | None = None) -> Any:
        """Wait for an event of ``event_type`` whose payload contains ``match``; return its payload.

        Sees every matching event published since the execution started, even one published
        before the wait was reached; each event satisfies at most one wait of an execution.
        """
        check_name(event_type, "an event type")
        if match is not None:
            if not isinstance(match, dict):
                raise exceptions.WorkflowValueError("INVALID_EVENT", f"match must be a dict or None, not {match!r}")
            match = values.roundtrip(match, code="INVALID_EVENT")[1]
        waiting_for = {"kind": EVENT, "event_type": event_type, **({"match": match} if match is not None else {})}
        return self._await(key, "event", EVENT, event_type, timeout, waiting_for, match=match)

    def wait_for_signal(self, key: str, name: str, *, timeout: float | None = None) -> Any:
        """Wait for a signal ``name`` sent to this execution; return its payload.

        Signals are buffered per execution and delivered in the order sent, each once.
        """
        check_name(name, "a signal name")
        return self._await(key, "signal", SIGNAL, name, timeout, {"kind": SIGNAL, "name": name})

    def wait_for_token(self, key: str, *, token: str | None = None, timeout: float | None = None) -> Any:
        """Wait until ``token`` is completed (``durableflow.complete_token``); return the payload.

        The token defaults to ``"<execution id>:<key>"``.
        """
        token = f"{self._ctx.execution_id}:{key}" if token is None else token
        check_name(token, "a token", MAX_TOKEN)
        return self._await(key, "token", TOKEN, token, timeout, {"kind": TOKEN, "token": token})

    # shared by every wait -------------------------------------------------------------

    def _await(
        self,
        key: str,
        kind: str,
        waiter_kind: str,
        target: str,
        timeout: float | None,
        waiting_for: dict[str, Any],
        *,
        match: Any = None,
        check: Check | None = None,
        on_register: Callable[[], None] | None = None,
    ) -> Any:
        """Register the wait (once), then return what satisfies it, raise its recorded error, or suspend."""
        ctx = self._ctx
        if not isinstance(key, str):
            raise TypeError(f"ctx.step.{_METHODS[kind]}() needs a step key first")
        key, _ = ctx._key((key,))
        if timeout is not None and (isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or timeout < 0):
            raise TypeError("timeout must be a non-negative number of seconds")
        record = ctx._reach(key, kind)
        if record is not None and record.status == StepStatus.COMPLETED:
            return record.value
        if record is not None and record.status == StepStatus.FAILED:
            ctx._raise_recorded(record)
        storage = ctx._journal.storage

        def register(until: Any) -> Any:
            waiter = storage.add_waiter(
                {
                    "execution_id": ctx.execution_id,
                    "key": key,
                    "kind": waiter_kind,
                    "target": target,
                    "match": match,
                    "deadline_at": until,
                    "created_at": NOW,
                }
            )
            if on_register is not None:
                on_register()
            return waiter

        if record is None:
            ctx._go_live()
            now = ctx._journal.now()
            until = None if timeout is None else now + timedelta(seconds=timeout)
            meta = {"target": target, **({"match": match} if match is not None else {})}
            if until is not None:
                meta.update(until=iso(until), timeout=timeout)
            record = StepRecordData(key=key, kind=kind, status=StepStatus.WAITING, meta=meta, started_at=now)
            with storage.atomic():  # the record and its waiter exist together, or neither
                ctx._write(record, new=True)
                waiter = register(until)
        elif record.error is not None:
            record, waiter, until = self._wait_again(record)
        else:
            until = parse_iso(record.meta["until"]) if record.meta.get("until") else None
            # A record without its waiter (rows deleted by hand?): register it again.
            waiter = storage.get_waiter(ctx.execution_id, key) or register(until)
        check = check or self._message_check
        try:
            answer = check(waiter)
            if answer is PENDING and until is not None and ctx._journal.now() >= until:
                # The deadline passed: close the wait, unless something satisfied it first.
                if not storage.update_waiter(waiter.id, {"status": W.EXPIRED, "resolved_at": NOW}, statuses=[W.OPEN]):
                    answer = check(storage.get_waiter(ctx.execution_id, key))  # satisfied, or closed before
                if answer is PENDING:
                    raise exceptions.WaitTimeout(
                        message=f"{_METHODS[kind]}({key!r}) was not satisfied by its deadline {iso(until)}",
                        step=key,
                    )
        except exceptions.DurableflowError as exc:
            self._record_failure(kind, key, record, 1, exc, record.started_at)
        if answer is PENDING:
            raise ctx._suspend(until, {**waiting_for, "step": key, "until": iso(until) if until else None})
        value, extra = answer
        ctx._go_live()
        ctx._record_live(key, kind, value, attempts=1, meta={**record.meta, **extra}, started_at=record.started_at)
        return value

    def _wait_again(self, record: StepRecordData) -> tuple[StepRecordData, Any, Any]:
        """``retry()`` of a run that failed at this wait: the wait starts over, with a new deadline."""
        ctx = self._ctx
        ctx._go_live()
        storage = ctx._journal.storage
        now = ctx._journal.now()
        timeout = record.meta.get("timeout")
        until = None if timeout is None else now + timedelta(seconds=timeout)
        meta = {k: v for k, v in record.meta.items() if k != "until"} | ({"until": iso(until)} if until else {})
        again = StepRecordData(
            key=record.key, kind=record.kind, status=StepStatus.WAITING, meta=meta, started_at=record.started_at
        )
        waiter = storage.get_waiter(ctx.execution_id, record.key)
        with storage.atomic():
            ctx._write(again, new=False)
            storage.update_waiter(
                waiter.id,
                {"status": W.OPEN, "resolved_at": None, "deadline_at": until},
                statuses=[W.EXPIRED, W.SATISFIED],
            )
        return again, storage.get_waiter(ctx.execution_id, record.key), until

    def _message_check(self, waiter: Any) -> Any:
        """Events, signals and tokens: the event the waiter took, or the earliest it can take now."""
        storage = self._ctx._journal.storage
        if waiter.status == W.OPEN:
            event, closed = satisfy(storage, waiter)
            if event is not None:
                return event.payload, {"event_id": event.event_id}
            if not closed:
                return PENDING
            waiter = storage.get_waiter(waiter.execution_id, waiter.key)
        if waiter.status == W.SATISFIED:
            event = storage.get_event(waiter.event_id)
            return (None, {}) if event is None else (event.payload, {"event_id": event.event_id})
        return PENDING


_METHODS = {
    "event": "wait_for_event",
    "signal": "wait_for_signal",
    "token": "wait_for_token",
    "wait_execution": "wait_for_execution",
}
