"""``on`` states: wait for an event (with guards) or the ``after`` delay, on the engine's waits.

Each wait is an event wait of the engine (``durableflow.engine.steps.waits``): it sees every
matching event published since the execution started, each event satisfies at most one wait
of the execution, the ``after`` delay is the wait's timeout (a ``WaitTimeout`` recorded at the
step, so a replay takes the same branch), and no worker is held meanwhile.

- An ``on`` state whose branches name one event type waits with ``ctx.step.wait_for_event``.
- One that names several registers one waiter per type in the same step (``_await``'s
  registration hook) and takes the earliest published event among them; the other waiters
  are closed then (or at the timeout). An event of another of those types published in the
  moment between the winner's and the closing is consumed with them: the state has moved
  on, as it would have had that event come a moment later.
- An event whose guards all fail is ignored (consumed) and the state waits again
  (``"<key>#2"``, ``#3``…) until the deadline its first wait set.
- An ``on`` state without event branches is a durable timer (``ctx.step.sleep``).
"""

from __future__ import annotations

from typing import Any

from durableflow import exceptions
from durableflow.documents.machine import Run, Transition
from durableflow.engine.context import parse_iso
from durableflow.engine.states import WaiterStatus
from durableflow.engine.steps.waits import PENDING
from durableflow.engine.storage import NOW
from durableflow.engine.waits import EVENT, satisfy

__all__ = ["wait"]

W = WaiterStatus


def wait(ctx: Any, machine: Run, state: dict[str, Any], key: str) -> Transition:
    """The transition an ``on`` state takes: an event branch, or ``after`` once its delay passed."""
    after: Any = state.get("after")  # the compiler gives an ``on`` state without events an ``after``
    types = machine.event_types(state)
    if not types:
        ctx.step.sleep(key, after["ms"] / 1000)
        return machine.timed_out(state)
    attempt = 1
    while True:
        wait_key = key if attempt == 1 else f"{key}#{attempt}"
        try:
            event_type, payload = _wait(ctx, wait_key, types, _timeout(ctx, key, after, attempt))
        except exceptions.WaitTimeout:
            if after is None or ctx.interrupt is not None:
                raise
            return machine.timed_out(state)
        transition = machine.event(state, event_type, payload)
        if transition is not None:
            return transition
        attempt += 1  # no guard held: the event is ignored, the state waits on


def _timeout(ctx: Any, key: str, after: dict[str, Any] | None, attempt: int) -> float | None:
    """Seconds left of the ``after`` delay, counted from the state's first wait."""
    if after is None:
        return None
    if attempt == 1:
        return after["ms"] / 1000
    first = ctx._records.get(key)
    until = parse_iso(first.meta["until"]) if first is not None and first.meta.get("until") else None
    if until is None:  # pragma: no cover - the first wait of a state with a delay records its deadline
        return after["ms"] / 1000
    return max(0.0, (until - ctx._journal.now()).total_seconds())


def _wait(ctx: Any, key: str, types: list[str], timeout: float | None) -> tuple[str, Any]:
    if len(types) == 1:
        return types[0], ctx.step.wait_for_event(key, types[0], timeout=timeout)
    found = _AnyOf(ctx, key, types).wait(timeout)
    return found["event"], found["payload"]


class _AnyOf:
    """One step waiting for the earliest event of several types: a waiter per type."""

    def __init__(self, ctx: Any, key: str, types: list[str]):
        self.ctx = ctx
        self.storage = ctx._journal.storage
        self.key = key
        self.types = types
        self.keys = [key] + [f"{key}/{n}" for n in range(1, len(types))]

    def wait(self, timeout: float | None) -> dict[str, Any]:
        waiting_for = {"kind": EVENT, "event_types": self.types}
        try:
            return self.ctx.step._await(
                self.key, "event", EVENT, self.types[0], timeout, waiting_for,
                check=self.check, on_register=self.register_others,
            )  # fmt: skip
        except exceptions.WaitTimeout:
            self.close(keep=None)
            raise

    def register_others(self) -> None:
        """With the first type's waiter (same transaction): one for each other type."""
        deadline = self.storage.get_waiter(self.ctx.execution_id, self.key).deadline_at
        for key, event_type in zip(self.keys[1:], self.types[1:], strict=True):
            self.storage.add_waiter(
                {
                    "execution_id": self.ctx.execution_id,
                    "key": key,
                    "kind": EVENT,
                    "target": event_type,
                    "match": None,
                    "deadline_at": deadline,
                    "created_at": NOW,
                }
            )

    def check(self, first: Any) -> Any:
        """The earliest event one of the waiters took, or can take now; PENDING if none."""
        waiters = [first] + [self.storage.get_waiter(self.ctx.execution_id, key) for key in self.keys[1:]]
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
            waiter = self.storage.get_waiter(self.ctx.execution_id, key)
            if waiter is not None and waiter.status == W.OPEN:
                self.storage.update_waiter(waiter.id, {"status": W.EXPIRED, "resolved_at": NOW}, statuses=[W.OPEN])
