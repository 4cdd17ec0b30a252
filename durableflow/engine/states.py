"""Statuses, and the one table of the moves between them.

Every status change, in every storage, is checked against ``TRANSITIONS``: a verb asks
``sources_for(target)`` for the statuses it may move from and makes its write conditional
on them, so a cancelled execution cannot become completed by a late delivery, a completed
one cannot be retried. No other module lists statuses that may move.
"""

from __future__ import annotations

from durableflow import exceptions

__all__ = [
    "ExecutionStatus",
    "StepStatus",
    "WaiterStatus",
    "TRANSITIONS",
    "TERMINAL",
    "RUNNABLE",
    "DUE_ONLY",
    "LEASED",
    "QUEUED",
    "can_transition",
    "sources_for",
    "check_transition",
]


class ExecutionStatus:
    PENDING = "pending"
    RUNNING = "running"
    WAITING = "waiting"
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"
    COMPENSATED = "compensated"
    COMPENSATION_FAILED = "compensation_failed"

    choices = [PENDING, RUNNING, WAITING, COMPLETED, FAILED, CANCELLED, COMPENSATED, COMPENSATION_FAILED]


class StepStatus:
    RUNNING = "running"
    WAITING = "waiting"
    COMPLETED = "completed"
    FAILED = "failed"

    choices = [RUNNING, WAITING, COMPLETED, FAILED]


# A step record that is final (its value or error replays) or not yet (a running attempt, a
# retry's or a wait's record).
STEP_FINISHED = frozenset({StepStatus.COMPLETED, StepStatus.FAILED})
STEP_UNFINISHED = frozenset({StepStatus.WAITING, StepStatus.RUNNING})
# What a record written after a failed attempt says: failed for good, or waiting for its retry.
STEP_AFTER_FAILED_ATTEMPT = frozenset({StepStatus.FAILED, StepStatus.WAITING})


class WaiterStatus:
    """A registered wait: open until something satisfies it or its deadline closes it."""

    OPEN = "open"
    SATISFIED = "satisfied"
    EXPIRED = "expired"

    choices = [OPEN, SATISFIED, EXPIRED]


S = ExecutionStatus

TRANSITIONS: dict[str, frozenset[str]] = {
    # A new execution is claimed by a delivery, or cancelled before it ever ran.
    S.PENDING: frozenset({S.RUNNING, S.CANCELLED}),
    # A delivery's outcome; RUNNING -> RUNNING is a claim after a crashed delivery's lease
    # expired, RUNNING -> PENDING a delivery that ends without an outcome (a replay at once)
    # or a cancel that must still run compensations. A run that unwinds ends cancelled (on
    # cancel), compensated or compensation_failed.
    S.RUNNING: frozenset(
        {S.RUNNING, S.PENDING, S.WAITING, S.COMPLETED, S.FAILED, S.CANCELLED, S.COMPENSATED, S.COMPENSATION_FAILED}
    ),
    # Woken (by the sweep, an event, a signal...) or claimed once due; cancelled at once, or
    # made pending by a cancel whose compensations a delivery must still run (engine/sagas.py).
    S.WAITING: frozenset({S.PENDING, S.RUNNING, S.CANCELLED}),
    # ``retry()`` resumes a failed run from the step that failed it.
    S.FAILED: frozenset({S.PENDING}),
    S.COMPLETED: frozenset(),
    S.CANCELLED: frozenset(),
    S.COMPENSATED: frozenset(),
    S.COMPENSATION_FAILED: frozenset(),
}

# Finished: ``result()`` answers, nothing runs it again (a failed run only through retry()).
TERMINAL = frozenset({S.COMPLETED, S.FAILED, S.CANCELLED, S.COMPENSATED, S.COMPENSATION_FAILED})
# Unfinished: what a delivery may claim.
RUNNABLE = frozenset(TRANSITIONS) - TERMINAL
# Claimable only once their ``wake_at`` is due (the others whenever their lease is free).
DUE_ONLY = frozenset({S.WAITING})
# Held by a delivery: a wake-up that finds one is remembered (``wake_pending``) and turns the
# delivery's suspension into a replay at once, so that it is never lost.
LEASED = frozenset({S.RUNNING})
# What a run queued for a concurrency slot is (durableflow.engine.concurrency): not started yet.
QUEUED = frozenset({S.PENDING})


def can_transition(source: str, target: str) -> bool:
    return target in TRANSITIONS.get(source, frozenset())


def sources_for(target: str) -> frozenset[str]:
    """The statuses an execution may be in to move to ``target``."""
    return frozenset(source for source, targets in TRANSITIONS.items() if target in targets)


def check_transition(execution_id: str, source: str, target: str, action: str) -> None:
    """Raise ``InvalidTransition`` naming the action if ``source`` may not become ``target``."""
    if not can_transition(source, target):
        raise exceptions.InvalidTransition(
            message=f"execution {execution_id} is {source}; it cannot be {action}", status=source
        )
