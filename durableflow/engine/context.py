"""The workflow context: ``ctx``, replayed against a journal.

A delivery runs the workflow function from the top. Each step method (``ctx.step``, in
``durableflow.engine.steps``) looks its key up in the journal loaded at claim time: a
completed step returns its recorded value without running; the first step without a record
runs live and is written (one fenced write). Suspending (a sleep, a durable retry, a wait)
raises ``Suspend``, which ends the delivery. A cancelled run (``cancel_requested`` in its claim)
stops at the first step without a finished record with ``CancelRequested``, latched the same
way, and its delivery unwinds (``durableflow.engine.sagas``).
"""

from __future__ import annotations

import logging
import random
import uuid
from datetime import datetime, timezone
from typing import Any

from durableflow import values
from durableflow.engine import logs
from durableflow.engine.delivery import MAX_KEY_LENGTH, Delivery
from durableflow.engine.records import Claim, CompensateRequested, ContinueAsNew, Suspend

__all__ = ["Context", "Suspend", "MAX_KEY_LENGTH", "iso", "parse_iso", "delivery_of"]


def iso(moment: datetime) -> str:
    return moment.astimezone(timezone.utc).isoformat()


def parse_iso(text: str) -> datetime:
    return datetime.fromisoformat(text)


class Context:
    """What a workflow function receives as ``ctx``."""

    def __init__(self, claim: Claim, delivery: Delivery):
        self.execution_id = claim.execution_id
        self.workflow = claim.workflow
        self.params = claim.params
        self.parent_id = claim.parent_id
        self.root_id = claim.root_id or claim.execution_id
        self.delivery = claim.delivery
        self.logger = logging.LoggerAdapter(
            logs.logger("durableflow.workflow"), {"execution_id": claim.execution_id}
        )
        from durableflow.engine.metadata import Metadata
        from durableflow.engine.steps import StepAPI

        self._delivery = delivery
        self._rng = random.Random(claim.seed or claim.execution_id)
        self._now_calls = 0
        self.step = StepAPI(self)
        self.metadata = Metadata(self)

    @property
    def interrupt(self) -> BaseException | None:
        """What ends this delivery whatever workflow code does: a storage fault, else the first
        interrupt a step raised (``Delivery.interrupt``)."""
        return self._delivery.interrupt

    # Deterministic helpers ------------------------------------------------------------

    def now(self) -> datetime:
        """The current time, journaled: a replay returns the time the first run saw."""
        self._now_calls += 1
        key = f"$now:{self._now_calls}"
        run = self._delivery
        record = run.reach(key, "now")
        if record is None:
            record = run.record_live(key, "now", iso(run.journal.now()), attempts=1)
        return parse_iso(record.value)

    def random(self) -> float:
        """A float in [0, 1), from a generator seeded by the execution id."""
        return self._rng.random()

    def uuid(self) -> uuid.UUID:
        """A UUID4 from the same seeded generator: the same on every replay."""
        return uuid.UUID(int=self._rng.getrandbits(128), version=4)

    def patched(self, patch_id: str) -> bool:
        """Whether this run takes the new code of ``patch_id``: ``if ctx.patched("id"): new else: old``.

        True (and its marker is journaled) for a run that reaches this point under this code; False
        on the replay of a run that went past it under the old code. Asked again, the same answer.
        """
        from durableflow.engine.steps import patches

        return patches.patched(self, patch_id)

    def deprecate_patch(self, patch_id: str) -> None:
        """The old branch of ``patch_id`` is removed: runs that hold its marker replay on; a run
        that took the old branch stalls here (``NON_DETERMINISM``) instead of running the wrong code."""
        from durableflow.engine.steps import patches

        patches.deprecate_patch(self, patch_id)

    def stream(self, stream_id: str):
        """The run's stream ``stream_id``: ``ctx.stream("log").write("line")`` appends a chunk
        that readers see at once (``durableflow.streams.read``, the REST API, the admin)."""
        from durableflow.engine.streams import Stream

        return Stream(self, stream_id)

    def continue_as_new(self, params: Any = None) -> None:
        """Complete this execution and start a fresh one of the same workflow with ``params``.

        The new execution has the same root (and parent) and an empty journal, so that a loop
        that never ends keeps a short one. Nothing after this call runs. ``result()`` of this
        execution (and a parent's wait for it) answers with the outcome of the last one.
        """
        run = self._delivery
        if run.interrupt is not None:
            raise run.interrupt
        run.refuse_inside_step("continue_as_new")
        _, decoded = values.roundtrip(params, max_bytes=run.settings.max_payload_bytes)
        run.go_live()
        raise run.latch(ContinueAsNew(decoded))

    def compensate(self) -> None:
        """End the run now by running its compensations, last-completed-first.

        The run ends ``compensated`` (or ``compensation_failed``); nothing after this call runs.
        """
        run = self._delivery
        if run.interrupt is not None:
            raise run.interrupt
        run.refuse_inside_step("compensate")
        raise run.latch(CompensateRequested("compensate"))


def delivery_of(ctx: Context) -> Delivery:
    """The engine's side of ``ctx``'s delivery (``durableflow.engine.delivery``): what step
    kinds, documents, sagas and the driver work with, never the workflow author."""
    return ctx._delivery
