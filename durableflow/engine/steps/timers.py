"""``ctx.step.sleep`` and ``ctx.step.sleep_until``: durable timers (no worker is held)."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any, Callable

from durableflow import exceptions
from durableflow.engine.context import iso, parse_iso
from durableflow.engine.records import StepRecordData
from durableflow.engine.states import StepStatus
from durableflow.engine.steps.base import StepBase

__all__ = ["TimerSteps", "MAX_SLEEP_SECONDS"]

MAX_SLEEP_SECONDS = 100 * 366 * 86_400  # a century: the longest durable timer


class TimerSteps(StepBase):
    def sleep(self, *args: Any) -> None:
        """``sleep(key, seconds)``: a durable timer; no worker is held while it runs.

        ``seconds`` from 0 to a century; anything else (NaN, the infinities, 1e15, which no
        date can be that far away) raises ``WorkflowValueError("INVALID_DELAY")`` at the call.
        """
        delivery = self._delivery
        key, rest = delivery.key(args)
        if len(rest) != 1 or isinstance(rest[0], bool) or not isinstance(rest[0], (int, float)):
            raise TypeError("ctx.step.sleep(key, seconds) needs a number of seconds")
        if not 0 <= rest[0] <= MAX_SLEEP_SECONDS:  # NaN fails both
            raise exceptions.WorkflowValueError(
                "INVALID_DELAY",
                f"ctx.step.sleep({key!r}, {rest[0]!r}): seconds must be a number from 0 to {MAX_SLEEP_SECONDS:,} "
                "(a century)",
            )
        self._timer(key, lambda now: now + timedelta(seconds=rest[0]))

    def sleep_until(self, *args: Any) -> None:
        """``sleep_until(key, when)``: a durable timer until an aware datetime."""
        delivery = self._delivery
        key, rest = delivery.key(args)
        if len(rest) != 1 or not isinstance(rest[0], datetime) or rest[0].tzinfo is None:
            raise TypeError("ctx.step.sleep_until(key, when) needs a timezone-aware datetime")
        self._timer(key, lambda now: rest[0])

    def _timer(self, key: str, due: Callable[[datetime], datetime]) -> None:
        delivery = self._delivery
        record = delivery.reach(key, "sleep")
        if record is not None and record.status == StepStatus.COMPLETED:
            return None
        now = delivery.journal.now()
        if record is None:
            delivery.go_live()
            until = due(now)
            if until <= now:
                delivery.record_live(key, "sleep", None, attempts=1, meta={"until": iso(until)})
                return None
            delivery.write(
                StepRecordData(
                    key=key, kind="sleep", status=StepStatus.WAITING, meta={"until": iso(until)}, started_at=now
                ),
                new=True,
            )
        else:
            until = parse_iso(record.meta["until"])
            if until <= now:
                delivery.go_live()
                delivery.record_live(key, "sleep", None, attempts=1, meta=record.meta, started_at=record.started_at)
                return None
        raise delivery.suspend(until, {"kind": "timer", "step": key, "until": iso(until)})

    # poll ------------------------------------------------------------------------------
