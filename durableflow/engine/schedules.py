"""Schedules: which ticks of a schedule a tick starts, and the verb that starts them.

A schedule's **ticks** are the moments it names (``Every``: a multiple of its interval since the
Unix epoch; ``Cron``: each minute its five fields match). Beat only wakes the verb up; the verb
works out the tick from the schedule and the storage's clock, never from when the message was
sent or run: the latest tick at or before now. Its execution's idempotency key is
``schedule:<name>:<tick, ISO 8601 in UTC>``, so two beats, a re-sent message or a tick handled
twice start one execution for it.

**Missed ticks** are the ticks before the current one that started nothing since the last tick
that did (found by their keys: the tick before, and so on back; a caller that records the last
tick started passes it, so that ticks whose executions were pruned since are not missed). After
downtime (``catch_up``): ``"one"`` starts one execution for them, the latest missed tick's,
``"none"`` none, ``"all"`` one per missed tick (at most ``MAX_CATCH_UP``, the latest ones). The
current tick starts unless it is recorded as started. Ticks before ``floor`` (when the schedule
was defined) are never missed.

Safe to run from several processes at once: every start is idempotent by its key (the
storage's unique constraint decides), so two ticks that read the same state start the same
executions once, and one that read a state the other changed starts a tick already started,
which returns the existing execution.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import date, datetime, time, timedelta, timezone, tzinfo
from typing import TYPE_CHECKING, Any, Callable, Protocol

from durableflow import exceptions

if TYPE_CHECKING:
    from durableflow.engine.verbs import Engine
    from durableflow.registry import WorkflowDefinition

__all__ = [
    "CATCH_UP",
    "MAX_CATCH_UP",
    "MAX_NAME_LENGTH",
    "Ticks",
    "Every",
    "Cron",
    "tick_key",
    "tick_of",
    "check_catch_up",
    "due_ticks",
    "Schedules",
]

logger = logging.getLogger("durableflow.schedules")

CATCH_UP = ("one", "none", "all")
MAX_CATCH_UP = 1000  # missed ticks one tick starts at most with catch_up="all" (the latest)
_KEY_PREFIX = "schedule:"
_ISO_LENGTH = len("2026-01-01T00:00:00+00:00")
MAX_NAME_LENGTH = 200 - len(_KEY_PREFIX) - 1 - _ISO_LENGTH  # the key fits an idempotency key
_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)


class Ticks(Protocol):
    """The moments a schedule names."""

    def latest(self, now: datetime) -> datetime | None:
        """The latest tick at or before ``now`` (None if there is none)."""

    def previous(self, tick: datetime) -> datetime | None:
        """The tick before ``tick``."""


@dataclass(frozen=True)
class Every:
    """A tick every ``seconds`` (a whole number above 0), at multiples of it since the Unix epoch."""

    seconds: int

    def __post_init__(self) -> None:
        if isinstance(self.seconds, bool) or not isinstance(self.seconds, int) or self.seconds < 1:
            raise ValueError(f"every: {self.seconds!r} is not a whole number of seconds above 0")

    def latest(self, now: datetime) -> datetime:
        elapsed = int((now - _EPOCH).total_seconds())  # whole seconds: the key carries no fraction
        return _EPOCH + timedelta(seconds=elapsed - elapsed % self.seconds)

    def previous(self, tick: datetime) -> datetime:
        return tick - timedelta(seconds=self.seconds)


@dataclass(frozen=True)
class Cron:
    """A tick each minute whose fields all match, read in ``tz``; Celery's crontab semantics
    (minute, hour, day of month, month and day of week, 0 = Sunday, must all match)."""

    minute: frozenset[int]
    hour: frozenset[int]
    day_of_month: frozenset[int]
    month_of_year: frozenset[int]
    day_of_week: frozenset[int]
    tz: tzinfo = timezone.utc

    # Feb 29 on a given weekday comes back within 28 years; a crontab that matches no day
    # in that long matches none ever.
    SEARCH_DAYS = 28 * 366 + 7

    def latest(self, now: datetime) -> datetime | None:
        local = now.astimezone(self.tz)
        day, last_minute = local.date(), local.hour * 60 + local.minute
        for back in range(self.SEARCH_DAYS):
            if back:
                day, last_minute = day - timedelta(days=1), 24 * 60 - 1
            if not self._matches(day):
                continue
            for hour in sorted((h for h in self.hour if h * 60 <= last_minute), reverse=True):
                for minute in sorted((m for m in self.minute if hour * 60 + m <= last_minute), reverse=True):
                    moment = datetime.combine(day, time(hour, minute), self.tz).astimezone(timezone.utc)
                    if moment <= now:  # a wall time a DST change skipped can land after now
                        return moment
        return None

    def previous(self, tick: datetime) -> datetime | None:
        return self.latest(tick - timedelta(seconds=1))

    def _matches(self, day: date) -> bool:
        return (
            day.month in self.month_of_year
            and day.day in self.day_of_month
            and day.isoweekday() % 7 in self.day_of_week
        )


def tick_key(name: str, tick: datetime) -> str:
    """The idempotency key of ``name``'s execution for ``tick``."""
    return f"{_KEY_PREFIX}{name}:{tick.astimezone(timezone.utc).isoformat(timespec='seconds')}"


def tick_of(name: str, idempotency_key: str) -> datetime | None:
    """The tick ``tick_key(name, ...)`` made ``idempotency_key`` for, or None."""
    prefix = f"{_KEY_PREFIX}{name}:"
    if not idempotency_key or not idempotency_key.startswith(prefix):
        return None
    try:
        return datetime.fromisoformat(idempotency_key[len(prefix) :])
    except ValueError:
        return None


def check_catch_up(catch_up: Any) -> str:
    if catch_up not in CATCH_UP:
        raise exceptions.ScheduleError(
            "INVALID_SCHEDULE", f"catch_up: {catch_up!r} is not one of {', '.join(map(repr, CATCH_UP))}"
        )
    return catch_up


def due_ticks(
    ticks: Ticks, now: datetime, *, catch_up: str, floor: datetime | None, started: Callable[[datetime], bool]
) -> list[datetime]:
    """The ticks a tick at ``now`` starts, oldest first: missed ones (as ``catch_up`` says),
    then the current one. None if the current tick is before ``floor``.

    ``started(tick)``: whether an execution was started for ``tick``; asked for the ticks
    before the current one, latest first, until one was (once for ``"one"``, never for ``"none"``).
    """
    current = ticks.latest(now)
    if current is None or (floor is not None and current < floor):
        return []
    missed: list[datetime] = []
    tick = ticks.previous(current) if catch_up != "none" else None
    while tick is not None and (floor is None or tick >= floor) and not started(tick):
        if len(missed) == MAX_CATCH_UP:
            logger.warning("a schedule caught up on its latest %d missed ticks only", MAX_CATCH_UP)
            break
        missed.append(tick)
        if catch_up == "one":
            break
        tick = ticks.previous(tick)
    return [*reversed(missed), current]


class Schedules:
    """The ``tick`` verb (a mixin of ``Engine``)."""

    def tick(
        self: Engine,
        name: str,
        workflow: str | Callable[..., Any] | WorkflowDefinition,
        params: Any,
        ticks: Ticks,
        *,
        catch_up: str = "one",
        floor: datetime | None,
        last: datetime | None = None,
        queue: str | None = None,
    ) -> list[Any]:
        """Start the executions one tick of schedule ``name`` is due (``due_ticks``), in one
        transaction; the executions, oldest tick first (ones started before are returned too).

        ``floor``: when the schedule was defined; ticks before it start nothing (None: no
        floor, every tick before the current one that started nothing is a missed one).
        ``last``: the latest tick recorded as started, if the caller keeps one: ticks up to it
        are not missed even when their executions are gone (pruned); the others are looked up
        by their keys.
        """
        check_catch_up(catch_up)
        definition = self.registry.resolve(workflow)

        def started(tick: datetime) -> bool:
            if last is not None and tick <= last:
                return True
            return self.storage.find_execution(definition.name, tick_key(name, tick)) is not None

        due = due_ticks(ticks, self.storage.now(), catch_up=catch_up, floor=floor, started=started)
        due = [tick for tick in due if last is None or tick > last]  # a re-sent tick, recorded: nothing
        keys = [tick_key(name, tick) for tick in due]
        try:
            return self.start_many(definition, [params] * len(keys), keys, queue=queue)
        except exceptions.WorkflowStartError as exc:
            if exc.code != "IDEMPOTENCY_CONFLICT":
                raise
        # A tick started before the schedule's params changed: it stays as it started.
        found = []
        for key in keys:
            try:
                found.append(self.start(definition, params, idempotency_key=key, queue=queue)[0])
            except exceptions.WorkflowStartError as exc:
                if exc.code != "IDEMPOTENCY_CONFLICT":
                    raise
                found.append(self.storage.find_execution(definition.name, key))
        return found
