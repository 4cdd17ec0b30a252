"""``ctx.step``: the step methods, one module per kind of step, mixed into one class.

Every method takes a step key first (or derives one from the call site) and is replayed
from the journal: see ``durableflow.engine.context``.
"""

from __future__ import annotations

from durableflow.engine.steps.children import ChildSteps
from durableflow.engine.steps.effects import EffectSteps
from durableflow.engine.steps.fanout import FanoutSteps
from durableflow.engine.steps.run import RunSteps
from durableflow.engine.steps.stores import StoreSteps
from durableflow.engine.steps.streams import StreamSteps
from durableflow.engine.steps.timers import TimerSteps
from durableflow.engine.steps.transactions import TransactionSteps
from durableflow.engine.steps.waits import WaitSteps

__all__ = ["StepAPI"]


class StepAPI(
    RunSteps, TimerSteps, TransactionSteps, EffectSteps, StoreSteps, StreamSteps, ChildSteps, WaitSteps, FanoutSteps
):
    """``ctx.step``: every method takes a step key first (or derives one from the call site)."""
