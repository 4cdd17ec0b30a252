"""``ctx.step.wait_for_event``, ``wait_for_any_event``, ``wait_for_signal``, ``wait_for_token``:
waits for the world.

A wait is a journal record (waiting, then completed with the payload or failed with
``WaitTimeout``) and a ``Waiter`` row registered in the same transaction, which also looks for
what satisfies it, under the lock its publishers take (see ``durableflow.engine.waits`` for why
that never misses an event). If nothing does, the delivery suspends: the execution waits
without a worker until a publisher satisfies the waiter, completes the record and wakes it
(its next delivery replays the record), or the sweep wakes it at its deadline. Which of the
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
from durableflow.engine.waits import EVENT, MAX_TOKEN, SIGNAL, TOKEN, check_name, lock_key, satisfy

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
        return self._await(
            key, "event", EVENT, event_type, timeout, waiting_for, match=match, locks=[lock_key(EVENT, event_type)]
        )

    def wait_for_any_event(self, key: str, event_types: list[str], *, timeout: float | None = None) -> tuple[str, Any]:
        """Wait for the earliest event of any of ``event_types``; return ``(event_type, payload)``.

        One step, one waiter per type (registered together): the earliest published event among
        them satisfies it and the other waiters are closed then (or at the timeout). An event of
        another of those types published in the moment between the winner and the closing is
        consumed with them. Sees events published since the execution started, as
        ``wait_for_event`` does; ``WaitTimeout`` once ``timeout`` seconds passed.
        """
        if not isinstance(event_types, (list, tuple)) or not event_types:
            raise exceptions.WorkflowValueError("INVALID_EVENT", "event_types must be a non-empty list of event types")
        for event_type in event_types:
            check_name(event_type, "an event type")
        if len(set(event_types)) != len(event_types):
            raise exceptions.WorkflowValueError("INVALID_EVENT", f"event_types names a type twice: {list(event_types)}")
        found = _AnyOf(self, key, list(event_types)).wait(timeout)
        return found["event"], found["payload"]

    def wait_for_signal(self, key: str, name: str, *, timeout: float | None = None) -> Any:
        """Wait for a signal ``name`` sent to this execution; return its payload.

        Signals are buffered per execution and delivered in the order sent, each once.
        """
        check_name(name, "a signal name")
        lock = lock_key(SIGNAL, name, self._ctx.execution_id)
        return self._await(key, "signal", SIGNAL, name, timeout, {"kind": SIGNAL, "name": name}, locks=[lock])

    def wait_for_token(self, key: str, *, token: str | None = None, timeout: float | None = None) -> Any:
        """Wait until ``token`` is completed (``durableflow.complete_token``); return the payload.

        The token defaults to ``"<execution id>:<key>"``.
        """
        token = f"{self._ctx.execution_id}:{key}" if token is None else token
        check_name(token, "a token", MAX_TOKEN)
        return self._await(
            key, "token", TOKEN, token, timeout, {"kind": TOKEN, "token": token}, locks=[lock_key(TOKEN, token)]
        )

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
        locks: list[str] | None = None,
        settles: bool = True,
        early: Callable[[], Any] | None = None,
    ) -> Any:
        """Register the wait (once), then return what satisfies it, raise its recorded error, or suspend.

        ``locks``: the ``lock_waits`` keys of what may satisfy it (events, signals, tokens); the
        registration and the first check are made under them, in one transaction, so that a
        publisher either finds the waiter or has committed the event the check finds (see
        ``durableflow.engine.waits``). ``settles``: whoever satisfies the waiter may complete this
        step's record (not for a wait that records something else than what satisfied it).
        ``early``: asked before anything is registered (a wait for an execution that ended
        already needs no waiter): PENDING, or the answer, recorded at once.
        """
        ctx = self._ctx
        delivery = self._delivery
        if not isinstance(key, str):
            raise TypeError(f"ctx.step.{_METHODS[kind]}() needs a step key first")
        key, _ = delivery.key((key,))
        if timeout is not None and (isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or timeout < 0):
            raise TypeError("timeout must be a non-negative number of seconds")
        replayed = delivery.replayed(key, kind)
        if replayed.done:
            return replayed.value
        record = replayed.record
        storage = delivery.journal.storage
        check = check or self._message_check
        # Under the locks, the check runs in the registering transaction; without (a child), after.
        checked: list[Any] = []

        def register(until: Any) -> Any:
            for lock in sorted(locks or ()):
                storage.lock_waits(waiter_kind, lock)
            waiter = storage.add_waiter(
                {
                    "execution_id": ctx.execution_id,
                    "key": key,
                    "kind": waiter_kind,
                    "target": target,
                    "match": match,
                    "deadline_at": until,
                    "created_at": NOW,
                    "settles": settles,
                }
            )
            if on_register is not None:
                on_register()
            if locks:
                checked.append(check(waiter))
            return waiter

        if record is None:
            delivery.go_live()
            now = delivery.journal.now()
            until = None if timeout is None else now + timedelta(seconds=timeout)
            meta = {"target": target, **({"match": match} if match is not None else {})}
            if until is not None:
                meta.update(until=iso(until), timeout=timeout)
            if early is not None:
                try:
                    found = early()
                except exceptions.DurableflowError as exc:
                    self._record_failure(kind, key, None, 1, exc, now, carry=meta)
                if found is not PENDING:
                    value, extra = found
                    delivery.record_live(key, kind, value, attempts=1, meta={**meta, **extra}, started_at=now)
                    return value
            record = StepRecordData(key=key, kind=kind, status=StepStatus.WAITING, meta=meta, started_at=now)
            with storage.atomic():  # the record and its waiter exist together, or neither
                delivery.write(record, new=True)
                waiter = register(until)
        elif record.error is not None:
            record, waiter, until = self._wait_again(record, locks, check if locks else None, checked, register)
        else:
            until = parse_iso(record.meta["until"]) if record.meta.get("until") else None
            waiter = storage.get_waiter(ctx.execution_id, key)
            if waiter is None:  # a record without its waiter (rows deleted by hand?): register it again
                with storage.atomic():
                    waiter = register(until)
        try:
            answer = checked[0] if checked else check(waiter)
            if answer is PENDING and until is not None and delivery.journal.now() >= until:
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
            raise delivery.suspend(until, {**waiting_for, "step": key, "until": iso(until) if until else None})
        value, extra = answer
        delivery.go_live()
        delivery.record_live(key, kind, value, attempts=1, meta={**record.meta, **extra}, started_at=record.started_at)
        return value

    def _wait_again(
        self,
        record: StepRecordData,
        locks: list[str] | None,
        check: Check | None,
        checked: list[Any],
        register: Callable[[Any], Any],
    ) -> tuple[StepRecordData, Any, Any]:
        """``retry()`` of a run that failed at this wait: the wait starts over, with a new deadline
        (under the ``locks``, and checked there with ``check``, as a first registration; one that
        failed without a waiter, on an execution that had ended already, registers one)."""
        ctx = self._ctx
        delivery = self._delivery
        delivery.go_live()
        storage = delivery.journal.storage
        now = delivery.journal.now()
        timeout = record.meta.get("timeout")
        until = None if timeout is None else now + timedelta(seconds=timeout)
        meta = {k: v for k, v in record.meta.items() if k != "until"} | ({"until": iso(until)} if until else {})
        again = StepRecordData(
            key=record.key, kind=record.kind, status=StepStatus.WAITING, meta=meta, started_at=record.started_at
        )
        waiter = storage.get_waiter(ctx.execution_id, record.key)
        if waiter is None:
            with storage.atomic():
                delivery.write(again, new=False)
                return again, register(until), until
        with storage.atomic():
            for lock in sorted(locks or ()):
                storage.lock_waits(waiter.kind, lock)
            delivery.write(again, new=False)
            storage.update_waiter(
                waiter.id,
                {"status": W.OPEN, "resolved_at": None, "deadline_at": until},
                statuses=[W.EXPIRED, W.SATISFIED],
            )
            waiter = storage.get_waiter(ctx.execution_id, record.key)
            if check is not None:
                checked.append(check(waiter))
        return again, waiter, until

    def _message_check(self, waiter: Any) -> Any:
        """Events, signals and tokens: the event the waiter took, or the earliest it can take now."""
        storage = self._delivery.journal.storage
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


class _AnyOf:
    """``wait_for_any_event``: one step waiting for the earliest event of several types, a waiter
    per type (the step's key for the first, ``<key>/1``, ``<key>/2``... for the others)."""

    def __init__(self, steps: WaitSteps, key: str, types: list[str]):
        self.steps = steps
        self.execution_id = steps._ctx.execution_id
        self.storage = steps._delivery.journal.storage
        self.key = key
        self.types = types
        self.keys = [key] + [f"{key}/{n}" for n in range(1, len(types))]

    def wait(self, timeout: float | None) -> dict[str, Any]:
        waiting_for = {"kind": EVENT, "event_types": self.types}
        try:
            return self.steps._await(
                self.key, "event", EVENT, self.types[0], timeout, waiting_for,
                check=self.check, on_register=self.register_others,
                locks=[lock_key(EVENT, event_type) for event_type in self.types], settles=False,
            )  # fmt: skip
        except exceptions.WaitTimeout:
            self.close(keep=None)
            raise

    def register_others(self) -> None:
        """With the first type's waiter (same transaction): one for each other type."""
        deadline = self.storage.get_waiter(self.execution_id, self.key).deadline_at
        for key, event_type in zip(self.keys[1:], self.types[1:], strict=True):
            self.storage.add_waiter(
                {
                    "execution_id": self.execution_id,
                    "key": key,
                    "kind": EVENT,
                    "target": event_type,
                    "match": None,
                    "deadline_at": deadline,
                    "created_at": NOW,
                    "settles": False,  # the step records the winner of several: its delivery does
                }
            )

    def check(self, first: Any) -> Any:
        """The earliest event one of the waiters took, or can take now; PENDING if none."""
        waiters = [first] + [self.storage.get_waiter(self.execution_id, key) for key in self.keys[1:]]
        taken = [(w, self.storage.get_event(w.event_id)) for w in waiters if w is not None and w.status == W.SATISFIED]
        taken = [(w, event) for w, event in taken if event is not None]
        if not taken:
            # Take only the earliest candidate: taking one per type would consume the others.
            candidates = []
            for waiter in waiters:
                if waiter is not None and waiter.status == W.OPEN:
                    events = self.storage.events_for(waiter, after=0, limit=1)
                    if events:
                        candidates.append((events[0].id, waiter))
            for _, waiter in sorted(candidates, key=lambda c: c[0]):
                event, _ = satisfy(self.storage, waiter)
                if event is not None:
                    taken = [(waiter, event)]
                    break
        if not taken:
            return PENDING
        waiter, event = min(taken, key=lambda pair: pair[1].id)
        self.close(keep=waiter.key)
        value = {"event": waiter.target, "payload": event.payload}
        return value, {"event_id": event.event_id, "event": waiter.target}

    def close(self, keep: str | None) -> None:
        """Close the open waiters other than ``keep``'s: nothing may satisfy them any more."""
        for key in self.keys:
            if key == keep:
                continue
            waiter = self.storage.get_waiter(self.execution_id, key)
            if waiter is not None and waiter.status == W.OPEN:
                self.storage.update_waiter(waiter.id, {"status": W.EXPIRED, "resolved_at": NOW}, statuses=[W.OPEN])


_METHODS = {
    "event": "wait_for_event",
    "signal": "wait_for_signal",
    "token": "wait_for_token",
    "wait_execution": "wait_for_execution",
}
