"""``on`` states: wait for an event (with guards) or the ``after`` delay, on the engine's waits.

Each wait is an event wait of the engine (``durableflow.engine.steps.waits``): it sees every
matching event published since the execution started, each event satisfies at most one wait
of the execution, the ``after`` delay is the wait's timeout (a ``WaitTimeout`` recorded at the
step, so a replay takes the same branch), and no worker is held meanwhile.

- An ``on`` state whose branches name one event type waits with ``ctx.step.wait_for_event``.
- One that names several waits with ``ctx.step.wait_for_any_event``: the earliest published
  event among them; an event of another of those types published in the moment between the
  winner and the closing of the other waiters is consumed with them: the state has moved on,
  as it would have had that event come a moment later.
- An event whose guards all fail is ignored (consumed) and the state waits again
  (``"<key>#2"``, ``#3``…) until the deadline its first wait set.
- An ``on`` state without event branches is a durable timer (``ctx.step.sleep``).
"""

from __future__ import annotations

from typing import Any

from durableflow import exceptions
from durableflow.documents.machine import Run, Transition
from durableflow.engine.context import delivery_of, parse_iso

__all__ = ["wait"]


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
    delivery = delivery_of(ctx)
    if after is None:
        return None
    if attempt == 1:
        return after["ms"] / 1000
    first = delivery.records.get(key)
    until = parse_iso(first.meta["until"]) if first is not None and first.meta.get("until") else None
    if until is None:  # pragma: no cover - the first wait of a state with a delay records its deadline
        return after["ms"] / 1000
    return max(0.0, (until - delivery.journal.now()).total_seconds())


def _wait(ctx: Any, key: str, types: list[str], timeout: float | None) -> tuple[str, Any]:
    if len(types) == 1:
        return types[0], ctx.step.wait_for_event(key, types[0], timeout=timeout)
    return ctx.step.wait_for_any_event(key, types, timeout=timeout)
