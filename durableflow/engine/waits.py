"""Waits satisfied from outside: events, signals, tokens, and the end of an execution.

The race between a wait being registered and what satisfies it is closed the same way on
both sides: each side writes and commits first, then reads. A delivery that reaches a wait
commits its ``Waiter`` row, then looks for stored events; ``send_event`` (``signal``,
``complete_token``) commits the event, then looks for open waiters. Whichever reads last
sees the other's row, so an event is never missed. Both then call the same ``satisfy``:
give the waiter the earliest event its execution has not consumed, by a conditional write
that the storage's unique constraint on (execution, event) makes exactly-once, whoever
makes it and however many make it at once. A wake-up that finds the execution still
running is remembered on its row (``Engine.wake``), so a delivery that suspended on what it
read before is delivered again at once.
"""

from __future__ import annotations

import uuid
from contextlib import nullcontext
from typing import TYPE_CHECKING, Any

from durableflow import exceptions, values
from durableflow.engine import logs
from durableflow.engine.states import TERMINAL
from durableflow.engine.storage import ANY, CLOSED, NOW, TAKEN, Storage

if TYPE_CHECKING:
    from durableflow.engine.verbs import Engine

__all__ = ["Waits", "EVENT", "SIGNAL", "TOKEN", "CHILD", "contains", "satisfy", "check_name", "check_payload"]

logger = logs.logger("durableflow")

EVENT, SIGNAL, TOKEN, CHILD = "event", "signal", "token", "child"

MAX_NAME = 200  # event types and signal names
MAX_TOKEN = 500  # "<execution id>:<step key>" fits
MAX_EVENT_ID = 190  # "event:<event id>" is the idempotency key of on_event starts (at most 200)
_BATCH = 100  # candidate events read at a time


def contains(payload: Any, match: Any) -> bool:
    """Whether ``payload`` contains ``match``: every key of a ``match`` dict is in the payload
    with a value that contains the match's value (nested dicts the same way); anything else
    must be equal (``True`` is not ``1``). ``None`` matches every payload."""
    if match is None:
        return True
    return _contains(payload, match)


def _contains(value: Any, pattern: Any) -> bool:
    if isinstance(pattern, dict):
        return isinstance(value, dict) and all(k in value and _contains(value[k], v) for k, v in pattern.items())
    if isinstance(pattern, list):
        return (
            isinstance(value, list)
            and len(value) == len(pattern)
            and all(_contains(a, b) and _contains(b, a) for a, b in zip(value, pattern, strict=True))
        )
    if isinstance(pattern, bool) or isinstance(value, bool):
        return value is pattern
    return value == pattern


def satisfy(storage: Storage, waiter: Any) -> tuple[Any | None, bool]:
    """Give the open ``waiter`` the earliest event it can take: ``(event, closed)``.

    ``event`` is the one taken, or None; ``closed`` says the waiter was resolved by someone
    else meanwhile (another publisher, the delivery, a timeout): read it again to see how.
    Safe to run any number of times at once for the same waiter or execution: the storage's
    ``take_event`` lets one conditional write win, and an event its execution already
    consumed in another wait is skipped for the next one.
    """
    after = 0
    while True:
        batch = storage.events_for(waiter, after=after, limit=_BATCH)
        for event in batch:
            if not contains(event.payload, waiter.match):
                continue
            outcome = storage.take_event(waiter.id, event.id)
            if outcome == TAKEN:
                return event, False
            if outcome == CLOSED:
                return None, True
            # CONSUMED: another wait of this execution has it; the next one may do.
        if len(batch) < _BATCH:
            return None, False
        after = batch[-1].id


def check_name(value: Any, what: str, limit: int = MAX_NAME) -> str:
    if not isinstance(value, str) or not value or len(value) > limit:
        raise exceptions.WorkflowValueError(
            "INVALID_EVENT", f"{what} must be a non-empty string of at most {limit} characters, not {value!r}"
        )
    fault = values.text_fault(value)
    if fault is not None:
        raise exceptions.WorkflowValueError("INVALID_EVENT", f"{what}: {fault}")
    return value


def check_payload(payload: Any, max_bytes: int | None) -> Any:
    try:
        return values.roundtrip(payload, max_bytes=max_bytes)[1]
    except exceptions.WorkflowValueError as exc:
        if exc.code == "PAYLOAD_TOO_LARGE":
            raise exceptions.WorkflowValueError("PAYLOAD_TOO_LARGE", f"payload: {exc.message}") from None
        raise exceptions.WorkflowValueError("INVALID_PAYLOAD", f"payload: {exc.message}") from None


class Waits:
    """``send_event``, ``signal``, ``complete_token`` and waking on an execution's end (a mixin of ``Engine``)."""

    def send_event(self: Engine, event_type: str, payload: Any = None, event_id: str | None = None) -> int:
        """Publish an event; return how many waits it satisfied (0 for a repeated ``event_id``).

        Stored first (idempotent by ``event_id``), with one execution started per workflow
        declared ``on_event`` of this type, in the same transaction; then every open wait for
        it takes the earliest event it matches. A repeat looks for open waits again, so a
        sender that died between the two commits is made good by sending the event again.
        """
        check_name(event_type, "an event type")
        if event_id is not None:
            check_name(event_id, "an event id", MAX_EVENT_ID)
        payload = check_payload(payload, self.settings.max_payload_bytes)
        starts = self.registry.for_event(event_type)
        # With executions to start, they and the event commit together; else the event alone.
        with self.storage.atomic() if starts else nullcontext():
            event = self.storage.add_event(
                {
                    "kind": EVENT,
                    "name": event_type,
                    "event_id": event_id or uuid.uuid4().hex,
                    "payload": payload,
                    "created_at": NOW,
                }
            )
            if event is not None:
                for definition in starts:
                    self.start(definition, payload, idempotency_key=f"event:{event.event_id}")
        return self._satisfy_waiters(EVENT, event_type, payload=payload if event is not None else ANY)

    def signal(self: Engine, execution_id: str, name: str, payload: Any = None) -> int:
        """Send a signal to an unfinished execution; return how many waits it satisfied (0 or 1).

        Signals are kept for the execution: each is delivered once, in the order sent, to
        the next ``wait_for_signal`` of that name (one already waiting, or the next reached).
        """
        check_name(name, "a signal name")
        payload = check_payload(payload, self.settings.max_payload_bytes)
        with self.storage.atomic():
            execution = self.get(execution_id)
            if execution.status in TERMINAL:
                raise exceptions.InvalidTransition(
                    message=f"execution {execution_id} is {execution.status}; it takes no more signals",
                    status=execution.status,
                )
            self.storage.add_event(
                {
                    "kind": SIGNAL,
                    "name": name,
                    "event_id": uuid.uuid4().hex,
                    "execution_id": execution_id,
                    "payload": payload,
                    "created_at": NOW,
                }
            )
        return self._satisfy_waiters(SIGNAL, name, execution_id=execution_id)

    def complete_token(self: Engine, token: str, payload: Any = None) -> int:
        """Complete a token once; return how many waits it satisfied.

        A token is known once its wait is reached; a default token (``"<execution id>:<key>"``)
        may also be completed before, while its execution is unfinished: the wait takes it
        when reached. ``TOKEN_ALREADY_COMPLETED`` for a second completion, ``TOKEN_NOT_FOUND``
        for a token nobody waits for; neither writes anything.
        """
        check_name(token, "a token", MAX_TOKEN)
        payload = check_payload(payload, self.settings.max_payload_bytes)
        with self.storage.atomic():
            owner = self._token_owner(token)
            event = self.storage.add_event(
                {
                    "kind": TOKEN,
                    "name": token,
                    "event_id": token,
                    "execution_id": owner,
                    "payload": payload,
                    "created_at": NOW,
                }
            )
            if event is None:
                raise exceptions.InvalidTransition(
                    "TOKEN_ALREADY_COMPLETED", f"token {token!r} was completed before; a token is completed once"
                )
            if owner is None:
                raise exceptions.ExecutionNotFound(
                    "TOKEN_NOT_FOUND",
                    f"no wait is registered for token {token!r}. Check the token; a custom token is known "
                    "once its wait is reached (a default token while its execution is unfinished).",
                )
        return self._satisfy_waiters(TOKEN, token)

    def finished(self: Engine, execution_id: str) -> list[str]:
        """``execution_id`` ended: wake the executions waiting for it (after its outcome committed)."""
        watchers = self.storage.watchers(execution_id)
        return self.wake(watchers) if watchers else []

    def _satisfy_waiters(self: Engine, kind: str, target: str, *, execution_id=None, payload=ANY) -> int:
        satisfied = 0
        for waiter in self.storage.open_waiters(kind, target, execution_id=execution_id, payload=payload):
            if payload is not ANY and not contains(payload, waiter.match):
                continue
            with self.storage.atomic():  # the execution is woken once this commits
                event, _ = satisfy(self.storage, waiter)
                if event is not None:
                    self.wake([waiter.execution_id])
                    satisfied += 1
        if satisfied:
            logger.info("%s %r satisfied %d wait(s)", kind, target, satisfied)
        return satisfied

    def _token_owner(self: Engine, token: str) -> str | None:
        """The execution waiting for ``token``, or the unfinished one a default token names."""
        waiting = self.storage.open_waiters(TOKEN, token)
        if waiting:
            return waiting[0].execution_id
        # "<execution id>:<step key>": ids and keys may contain ':' themselves; try each split.
        for at in (i for i, char in enumerate(token) if char == ":"):
            execution_id, key = token[:at], token[at + 1 :]
            execution = self.storage.get_execution(execution_id) if execution_id and key else None
            if execution is not None and execution.status not in TERMINAL:
                if self.storage.get_waiter(execution_id, key) is None:  # not reached (nor expired) yet
                    return execution_id
        return None
