"""Waits satisfied from outside: events, signals, tokens, and the end of an execution.

The race between a wait being registered and what satisfies it is closed by one lock per
thing waited for (``lock_key``: an event type, an execution's signals, a token), taken by both
sides until they commit (``Storage.lock_waits``). A delivery that reaches a wait registers its
``Waiter`` and, still under the lock, takes the earliest stored event it matches (``satisfy``);
``send_event`` (``signal``, ``complete_token``) stores the event and, under the same lock, gives
it to every open waiter it matches (``Storage.satisfy_waits``). Whichever takes the lock second
sees the other's committed row, so an event is never missed; and an open waiter never has an
older event it could take, so the publisher's event is the one it takes. Both conditional writes
are made exactly-once by the storage's unique constraint on (execution, event), whoever makes
them and however many make them at once. The publisher also completes the wait's step record
with the payload (the waiter ``settles`` it), so that the woken delivery replays it without a
read. A wake-up that finds the execution still running is remembered on its row
(``Engine.wake``), so a delivery that suspended on what it read before is delivered again at
once.
"""

from __future__ import annotations

import uuid
from contextlib import nullcontext
from typing import TYPE_CHECKING, Any

from durableflow import exceptions, values
from durableflow.engine import logs
from durableflow.engine.states import RUNNABLE, ExecutionStatus, StepStatus, WaiterStatus
from durableflow.engine.steering import nameable, wake_moves
from durableflow.engine.storage import ANY, CLOSED, NOW, TAKEN, Owner, Satisfaction, Satisfied, Storage

if TYPE_CHECKING:
    from durableflow.engine.verbs import Engine

__all__ = [
    "Waits",
    "EVENT",
    "SIGNAL",
    "TOKEN",
    "CHILD",
    "contains",
    "satisfy",
    "satisfy_steps",
    "lock_key",
    "settled",
    "check_name",
    "check_payload",
]

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


def lock_key(kind: str, target: str, execution_id: str | None = None) -> str:
    """The ``Storage.lock_waits`` key that a waiter's registrar and whoever may satisfy it share:
    the event type, the execution a signal is sent to, the token."""
    if kind == SIGNAL:
        if execution_id is None:
            raise TypeError("a signal's lock is its execution's")
        return execution_id
    return target


def settled(value: Any, meta: dict[str, Any]) -> dict[str, Any]:
    """The fields of a wait's step record completed with ``value`` (``meta`` merged into its own),
    as the delivery would record it."""
    return {"status": StepStatus.COMPLETED, "attempts": 1, "value": value, "error": None, "finished_at": NOW, "meta": meta}


def satisfy_steps(storage: Storage, request: Satisfaction) -> Satisfied:
    """``Storage.satisfy_waits``, step by step over the protocol's reads and conditional writes,
    in one transaction (for a storage that offers no single round trip)."""
    try:
        with storage.atomic():
            return _satisfy_steps(storage, request)
    except _Unowned:  # the event was rolled back: nobody to give it to
        return Satisfied()


class _Unowned(Exception):
    pass


def _satisfy_steps(storage: Storage, request: Satisfaction) -> Satisfied:
    storage.lock_waits(request.kind, request.lock)
    done = Satisfied()
    event = None
    if request.event is not None:
        fields = dict(request.event)
        if request.owner is not None:
            done.owner = fields["execution_id"] = _owner(storage, request.kind, request.target, request.owner)
        event = storage.add_event(fields)
        if event is None:
            return Satisfied(repeat=True, owner=done.owner)
        if request.owner is not None and done.owner is None:
            raise _Unowned  # stored first only to learn whether it was a repeat
        done.event = event.id
    addressee = done.owner if request.owner is not None and request.owner.addressed else None
    payload = request.payload if event is not None else ANY
    taken: set[str] = set()
    for waiter in storage.open_waiters(request.kind, request.target, execution_id=addressee, payload=payload):
        if waiter.execution_id in taken or (event is not None and not contains(request.payload, waiter.match)):
            continue
        if event is not None:
            if storage.take_event(waiter.id, event.id) != TAKEN:
                continue
        elif not storage.update_waiter(
            waiter.id, {"status": WaiterStatus.SATISFIED, "resolved_at": NOW}, statuses=[WaiterStatus.OPEN]
        ):
            continue
        taken.add(waiter.execution_id)
        if waiter.settles:
            record = storage.get_step(waiter.execution_id, waiter.key)
            if record is not None and record.status == StepStatus.WAITING:
                fields = {**request.settle, "meta": {**(record.meta or {}), **request.settle.get("meta", {})}}
                storage.update_step(waiter.execution_id, waiter.key, fields, statuses=[StepStatus.WAITING])
    done.taken = len(taken)
    done.moved = storage.mark_executions(sorted(taken), request.moves) if taken else []
    return done


def _owner(storage: Storage, kind: str, target: str, owner: Owner) -> str | None:
    """The execution ``owner`` names (``Owner``'s rule), or None."""
    if owner.waiting:
        waiting = storage.open_waiters(kind, target)
        if waiting:
            return waiting[0].execution_id
    for execution_id, key in owner.candidates:
        execution = storage.get_execution(execution_id, ("status",))
        if execution is not None and execution.status in owner.statuses:
            if key is None or storage.get_waiter(execution_id, key) is None:
                return execution_id
    return None


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

        Stored (idempotent by ``event_id``) and given to every open wait it matches in one
        transaction, with one execution started per workflow declared ``on_event`` of this type.
        A repeat looks for open waits again (an event stored before a sender that died could
        hand it on is made good by sending it again).
        """
        check_name(event_type, "an event type")
        if event_id is not None:
            check_name(event_id, "an event id", MAX_EVENT_ID)
        payload = check_payload(payload, self.settings.max_payload_bytes)
        event_id = event_id or uuid.uuid4().hex
        request = Satisfaction(
            kind=EVENT,
            target=event_type,
            lock=lock_key(EVENT, event_type),
            event={"kind": EVENT, "name": event_type, "event_id": event_id, "payload": payload, "created_at": NOW},
            payload=payload,
            settle=settled(payload, {"event_id": event_id}),
            moves=wake_moves(),
        )
        starts = self.registry.for_event(event_type)
        # With executions to start, they and the event commit together.
        with self.storage.atomic() if starts else nullcontext():
            done = self._satisfy(request)
            if not done.repeat:
                for definition in starts:
                    self.start(definition, payload, idempotency_key=f"event:{event_id}")
        if done.repeat:
            return self._satisfy_waiters(EVENT, event_type)
        return self._satisfied(done, EVENT, event_type, payload=payload)

    def signal(self: Engine, execution_id: str, name: str, payload: Any = None) -> int:
        """Send a signal to an unfinished execution; return how many waits it satisfied (0 or 1).

        Signals are kept for the execution: each is delivered once, in the order sent, to
        the next ``wait_for_signal`` of that name (one already waiting, or the next reached).
        """
        check_name(name, "a signal name")
        payload = check_payload(payload, self.settings.max_payload_bytes)
        if not nameable(execution_id):
            raise exceptions.ExecutionNotFound(message=f"no execution {execution_id!r}")
        event_id = uuid.uuid4().hex
        request = Satisfaction(
            kind=SIGNAL,
            target=name,
            lock=lock_key(SIGNAL, name, execution_id),
            event={"kind": SIGNAL, "name": name, "event_id": event_id, "payload": payload, "created_at": NOW},
            owner=Owner(candidates=((execution_id, None),), statuses=RUNNABLE, addressed=True),
            payload=payload,
            settle=settled(payload, {"event_id": event_id}),
            moves=wake_moves(),
        )
        done = self._satisfy(request)
        if done.owner is None:  # nothing was written
            execution = self.get(execution_id, ("status",))
            raise exceptions.InvalidTransition(
                message=f"execution {execution_id} is {execution.status}; it takes no more signals",
                status=execution.status,
            )
        return self._satisfied(done, SIGNAL, name, execution_id=execution_id, payload=payload)

    def complete_token(self: Engine, token: str, payload: Any = None) -> int:
        """Complete a token once; return how many waits it satisfied.

        A token is known once its wait is reached; a default token (``"<execution id>:<key>"``)
        may also be completed before, while its execution is unfinished: the wait takes it
        when reached. ``TOKEN_ALREADY_COMPLETED`` for a second completion, ``TOKEN_NOT_FOUND``
        for a token nobody waits for; neither writes anything.
        """
        check_name(token, "a token", MAX_TOKEN)
        payload = check_payload(payload, self.settings.max_payload_bytes)
        # "<execution id>:<step key>": ids and keys may contain ':' themselves; each split names one.
        splits = tuple(
            (token[:at], token[at + 1 :])
            for at, char in enumerate(token)
            if char == ":" and 0 < at < len(token) - 1 and nameable(token[:at])
        )
        request = Satisfaction(
            kind=TOKEN,
            target=token,
            lock=lock_key(TOKEN, token),
            event={"kind": TOKEN, "name": token, "event_id": token, "payload": payload, "created_at": NOW},
            # The execution waiting for it, or the unfinished one a default token names that has not
            # reached (nor let expire) that wait yet.
            owner=Owner(candidates=splits, statuses=RUNNABLE, waiting=True),
            payload=payload,
            settle=settled(payload, {"event_id": token}),
            moves=wake_moves(),
        )
        done = self._satisfy(request)
        if done.repeat:
            raise exceptions.InvalidTransition(
                "TOKEN_ALREADY_COMPLETED", f"token {token!r} was completed before; a token is completed once"
            )
        if done.owner is None:
            raise exceptions.ExecutionNotFound(
                "TOKEN_NOT_FOUND",
                f"no wait is registered for token {token!r}. Check the token; a custom token is known "
                "once its wait is reached (a default token while its execution is unfinished).",
            )
        return self._satisfied(done, TOKEN, token, payload=payload)

    def finished(self: Engine, execution_id: str, fields: dict[str, Any] | None = None) -> list[str]:
        """``execution_id`` ended (``fields``: its outcome's, if its delivery has them): wake the
        executions waiting for it (after its outcome committed).

        A completed one also completes their waits' step records with its result, in the same
        transaction as their wake-up (``Storage.satisfy_waits``), so that their deliveries replay
        those steps without reading it; any other end is read by their deliveries (a failure
        becomes their step's ``ChildExecutionError``, a continued run is followed).
        """
        if fields is not None and fields.get("status") == ExecutionStatus.COMPLETED and not fields.get("continued_as"):
            request = Satisfaction(
                kind=CHILD,
                target=execution_id,
                lock=lock_key(CHILD, execution_id),
                settle=settled(fields.get("result"), {"execution_id": execution_id}),
                moves=wake_moves(),
            )
            done = self._satisfy(request)
            return [execution_id for execution_id, _, _ in done.moved]
        watchers = self.storage.watchers(execution_id)
        return self.wake(watchers) if watchers else []

    def _satisfy(self: Engine, request: Satisfaction) -> Satisfied:
        """``Storage.satisfy_waits`` (step by step where the storage has no single round trip),
        and the deliveries of the executions it woke, sent once that commits."""
        done = self.storage.satisfy_waits(request)
        if done is None:
            done = satisfy_steps(self.storage, request)
        self.deliver_woken(done.moved)
        return done

    def _satisfied(self: Engine, done: Satisfied, kind: str, target: str, *, execution_id=None, payload=ANY) -> int:
        """How many waits ``done`` satisfied, with those the storage left to be judged here."""
        satisfied = done.taken
        if done.unsure:
            satisfied += self._satisfy_waiters(kind, target, execution_id=execution_id, payload=payload)
        if satisfied:
            logger.info("%s %r satisfied %d wait(s)", kind, target, satisfied)
        return satisfied

    def _satisfy_waiters(self: Engine, kind: str, target: str, *, execution_id=None, payload=ANY) -> int:
        """Each open waiter of ``kind`` on ``target`` (that ``payload`` may satisfy) takes the
        earliest event it can (``satisfy``), one by one: for a repeated event, and for waiters
        whose ``match`` the storage could not judge."""
        satisfied = 0
        for waiter in self.storage.open_waiters(kind, target, execution_id=execution_id, payload=payload):
            if payload is not ANY and not contains(payload, waiter.match):
                continue
            with self.storage.atomic():  # the execution is woken once this commits
                event, _ = satisfy(self.storage, waiter)
                if event is not None:
                    self.wake([waiter.execution_id])
                    satisfied += 1
        return satisfied
