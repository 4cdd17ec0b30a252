"""``on`` states: wait for an event (with guards) or the ``after`` delay, on the engine's waits."""

from __future__ import annotations

from typing import Any

from durableflow.documents.machine import Run, Transition

__all__ = ["wait"]


def wait(ctx: Any, machine: Run, state: dict[str, Any], key: str) -> Transition:
    """The transition an ``on`` state takes: an event branch, or ``after`` once its delay passed."""
    if not state["on"]:
        ctx.step.sleep(key, state["after"]["ms"] / 1000)
        return machine.timed_out(state)
    raise NotImplementedError("on states with events wait with ctx.step.wait_for_event, which this build lacks")
