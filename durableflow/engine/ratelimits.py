"""Rate limits: at most ``limit`` units per ``window`` seconds for one key, shared by every worker.

The limiter lives in the storage, one row per admission (``admitted_at``, ``units``), so every
worker on the database counts the same admissions. A storage's ``admit`` serialises the
requests of one key (an advisory lock per key on PostgreSQL; SQLite and the in-memory storage
serialise every writer), reads the admissions still in the window and the older requests still
waiting, and asks ``admission_time`` when this request fits: now (it is admitted, and its row
written with the storage's clock) or later (it is refused, and its execution sleeps until then).

Request order: a refused request keeps its row, with the time it first asked, and a newer
request of the same key is admitted only if it fits after every older request still waiting
(of an unfinished execution) has been admitted. A waiting request whose execution ends
(cancelled, failed) stops counting.

Once per step: the admission is unique per (execution, step key), so a replay, a retry of the
body, or a delivery that crashed after the admission finds it and takes no second unit.
"""

from __future__ import annotations

from collections import deque
from datetime import datetime, timedelta
from typing import Any, Iterable

from durableflow import exceptions, values
from durableflow.options import MAX_RATE_LIMIT_KEY, RateLimit

__all__ = ["admission_time", "fits_now", "limiter_key"]


def admission_time(
    now: datetime,
    admitted: Iterable[tuple[datetime, int]],
    ahead: Iterable[int],
    units: int,
    limit: int,
    window: float,
) -> datetime:
    """The earliest moment a request for ``units`` fits: ``now`` if it is admitted now.

    ``admitted``: the (time, units) of the key's admissions in the window ``(now - window,
    now]``, oldest first; ``ahead``: the units of the older requests still waiting, in request
    order. Each of those is placed first, at the earliest moment it fits, and this request after
    them: a moment is a fit when the units admitted in the window ending there, plus the
    request's, are at most ``limit``. An admission at ``t`` leaves the window at ``t + window``.
    """
    span = timedelta(seconds=window)
    held: deque[tuple[datetime, int]] = deque(sorted(admitted))
    used = sum(n for _, n in held)
    at = now
    for wanted in (*ahead, units):
        while held and held[0][0] <= at - span:  # already out of the window ending at ``at``
            used -= held.popleft()[1]
        while used + wanted > limit and held:
            moment, freed = held.popleft()
            at = max(at, moment + span)
            used -= freed
        held.append((at, wanted))
        used += wanted
    return at


def fits_now(used: int, ahead: int, units: int, limit: int) -> bool:
    """Whether a request fits now, from sums alone: the units admitted in the window, those of the
    older requests still waiting, and its own. When it does, ``admission_time`` answers ``now``
    (nothing has to leave the window), so a storage can admit without reading the rows; it reads
    them only to tell a refused request when it would fit."""
    return used + ahead + units <= limit


def limiter_key(rate_limit: RateLimit, step: str, args: tuple, kwargs: dict[str, Any]) -> str:
    """The limiter key of ``rate_limit`` for one step: its string, or its function of the step's
    arguments; ``WorkflowValueError("INVALID_RATE_LIMIT")`` if that is not a usable key."""
    key = rate_limit.key
    if callable(key):
        try:
            key = key(*args, **kwargs)
        except Exception as exc:
            raise exceptions.WorkflowValueError(
                "INVALID_RATE_LIMIT", f"step {step!r}: the rate limit's key function raised {exc!r}", step=step
            ) from exc
    if not isinstance(key, str) or not key:
        raise exceptions.WorkflowValueError(
            "INVALID_RATE_LIMIT",
            f"step {step!r}: a rate limit key must be a non-empty string, not {key!r}",
            step=step,
        )
    fault = values.text_fault(key)
    if len(key) > MAX_RATE_LIMIT_KEY or fault is not None:
        raise exceptions.WorkflowValueError(
            "INVALID_RATE_LIMIT",
            f"step {step!r}: rate limit key {key[:40]!r}: {fault or f'at most {MAX_RATE_LIMIT_KEY} characters'}",
            step=step,
        )
    return key
