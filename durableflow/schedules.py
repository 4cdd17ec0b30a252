"""Schedules on django-celery-beat: ``schedule``, ``unschedule`` and the tick beat sends.

A schedule is a ``PeriodicTask`` row (django-celery-beat's, editable in its admin) that runs the
``durableflow.tick`` task with ``{"schedule": name, "workflow": ..., "params": ..., "catch_up": ...}``
as its keyword arguments. Each tick reads the row's crontab or interval as it is then (an edit in
the admin is followed at the next tick) and calls the ``tick`` verb
(``durableflow.engine.schedules``), which starts the tick's execution once however many beats sent
it. The row's start time is the schedule's floor: ticks before it start nothing and are never
caught up (``schedule()`` sets it when the schedule is created or its timing changes; a row
without one, made by hand in the admin, counts from its last change). The latest tick started
is kept in the row's headers (``LAST_TICK``), so that ticks whose runs were pruned since are not
taken for missed ones.
"""

from __future__ import annotations

import json
from datetime import datetime, tzinfo
from datetime import timezone as dt_timezone
from typing import TYPE_CHECKING, Any, Callable

from django.db import router, transaction
from django.utils import timezone

from durableflow import dispatch, exceptions, values
from durableflow.conf import df_settings
from durableflow.engine import logs, schedules as engine_schedules
from durableflow.engine.schedules import Cron, Every, Ticks
from durableflow.engine.starts import StartRequest, prepare_start
from durableflow.registry import WorkflowDefinition

if TYPE_CHECKING:
    from django_celery_beat.models import PeriodicTask

__all__ = ["schedule", "unschedule", "start_due", "ticks_of", "ticks_for"]

logger = logs.logger("durableflow.schedules")

_CRON_FIELDS = ("minute", "hour", "day_of_month", "month_of_year", "day_of_week")
# The periodic task's header that keeps the latest tick started (beat sends it along, unused).
LAST_TICK = "durableflow_last_tick"
_MAX_EVERY = 2**31 - 1  # seconds: what django-celery-beat's interval column holds (68 years)


def schedule(
    name: str,
    workflow: str | Callable[..., Any] | WorkflowDefinition,
    params: Any = None,
    *,
    crontab: str | None = None,
    every: float | None = None,
    catch_up: str = "one",
) -> PeriodicTask:
    """Create or update the periodic task ``name`` that starts ``workflow`` with ``params`` at
    each tick of ``crontab`` (five fields: ``"*/5 * * * *"``) or ``every`` seconds; return it.

    Each tick starts one execution, ``idempotency_key="schedule:<name>:<tick>"`` (the tick in
    ISO 8601, UTC), however many beats send it. After downtime, ``catch_up="one"`` starts one
    execution for the missed ticks, ``"none"`` none, ``"all"`` one per missed tick. Calling it
    again with the same arguments changes nothing; a new crontab or interval counts from now.
    Bad input raises ``ScheduleError`` (``INVALID_SCHEDULE``, ``UNKNOWN_WORKFLOW``,
    ``INVALID_PARAMS``) and writes nothing.
    """
    from django_celery_beat.models import PeriodicTask

    _check_name(name)
    engine_schedules.check_catch_up(catch_up)
    timing = _timing(crontab, every)
    request = _checked_start(name, workflow, params)
    kwargs = json.dumps(
        {"schedule": name, "workflow": request.definition.name, "params": request.params, "catch_up": catch_up}
    )
    alias = router.db_for_write(PeriodicTask)
    with transaction.atomic(using=alias):
        task = PeriodicTask.objects.using(alias).select_for_update().filter(name=name).first()
        if task is not None and task.task != dispatch.TICK:
            raise exceptions.ScheduleError(
                "INVALID_SCHEDULE", f"the periodic task {name!r} runs {task.task!r}, not a durableflow schedule"
            )
        task = task or PeriodicTask(name=name, task=dispatch.TICK)
        changed_timing = task.pk is None or _timing_of(task) != _timing_key(timing)
        interval, cron = _schedule_rows(alias, timing) if changed_timing else (task.interval, task.crontab)
        wanted = {
            "interval": interval,
            "crontab": cron,
            "solar": None,
            "clocked": None,
            "args": "[]",
            "kwargs": kwargs,
            "queue": df_settings.DEFAULT_QUEUE,
            "one_off": False,
        }
        if not changed_timing and all(_same(task, field, value) for field, value in wanted.items()):
            return task  # nothing to write: beat need not reload its schedule
        for field, value in wanted.items():
            setattr(task, field, value)
        if changed_timing:
            task.start_time = timezone.now()
        task.save(using=alias)
    return task


def unschedule(name: str) -> bool:
    """Delete the schedule ``name``; whether there was one. Executions it started are kept.
    ``ScheduleError`` if ``name`` is a periodic task that is not a durableflow schedule."""
    from django_celery_beat.models import PeriodicTask

    alias = router.db_for_write(PeriodicTask)
    with transaction.atomic(using=alias):
        task = PeriodicTask.objects.using(alias).filter(name=name).first()
        if task is None:
            return False
        if task.task != dispatch.TICK:
            raise exceptions.ScheduleError(
                "INVALID_SCHEDULE", f"the periodic task {name!r} runs {task.task!r}, not a durableflow schedule"
            )
        task.delete(using=alias)  # the model's delete tells beat to reload
    return True


def start_due(schedule: str, workflow: str, params: Any = None, catch_up: str = "one") -> list[Any]:
    """Start the executions a tick of ``schedule`` is due (what the beat-sent task runs); the
    executions. None for a schedule deleted, disabled or of a kind without ticks (solar, clocked)."""
    from django_celery_beat.models import PeriodicTask

    from durableflow import operations

    task = PeriodicTask.objects.filter(name=schedule, task=dispatch.TICK).select_related("interval", "crontab").first()
    if task is None or not task.enabled:
        logger.info("schedule %r: no enabled periodic task has that name; the tick starts nothing", schedule)
        return []
    ticks = ticks_of(task)
    if ticks is None:
        logger.error("schedule %r: only a crontab or an interval names ticks; the tick starts nothing", schedule)
        return []
    floor = task.start_time or task.date_changed
    try:
        started = operations.engine().tick(
            schedule, workflow, params, ticks, catch_up=catch_up, floor=floor, last=_last_tick(task)
        )
    except exceptions.DurableflowError as exc:  # its keyword arguments, as edited in the admin
        logger.error("schedule %r: the tick starts nothing: %s", schedule, exc)
        return []
    if started:
        _record_last_tick(task, engine_schedules.tick_of(schedule, started[-1].idempotency_key))
    return started


def ticks_for(*, crontab: str | None = None, every: float | None = None) -> Ticks:
    """The ticks ``schedule(..., crontab=... | every=...)`` names (``ScheduleError`` as it would);
    a crontab in the time zone its periodic task would get (``CELERY_TIMEZONE``, else UTC)."""
    timing = _timing(crontab, every)
    if isinstance(timing, Every):
        return timing
    from django_celery_beat.models import CrontabSchedule

    return _cron_ticks(CrontabSchedule(**timing))  # not saved: its default time zone, its parsing


def ticks_of(task: PeriodicTask) -> Ticks | None:
    """The ticks a periodic task's crontab or interval names (the one mapping from its rows)."""
    if task.crontab is not None:
        return _cron_ticks(task.crontab)
    if task.interval is not None:
        seconds = task.interval.schedule.run_every.total_seconds()
        if seconds < 1 or seconds != int(seconds):
            logger.error("schedule %r: an interval of %s s is not a whole number of seconds", task.name, seconds)
            return None
        return Every(int(seconds))
    return None


def _last_tick(task: PeriodicTask) -> datetime | None:
    """The latest tick recorded as started in the periodic task's headers (None if unreadable)."""
    try:
        headers = json.loads(task.headers or "{}")
        tick = datetime.fromisoformat(headers[LAST_TICK])
    except (ValueError, TypeError, KeyError):
        return None
    return tick if tick.utcoffset() is not None else None


def _record_last_tick(task: PeriodicTask, tick: datetime | None) -> None:
    """Keep ``tick`` as the latest started, so that ticks whose runs were pruned since are not
    caught up again. Written with ``update()``: no signal, so beat does not reload its whole
    schedule at each tick; compared with the headers read, so that a later tick another process
    recorded meanwhile is kept. A value lost anyway (beat saving the row at that moment, a
    crash before this) only sends the next tick to the executions' keys again."""
    from django_celery_beat.models import PeriodicTask

    previous = _last_tick(task)
    if tick is None or (previous is not None and tick <= previous):
        return
    try:
        headers = json.loads(task.headers or "{}")
    except ValueError:
        return
    if not isinstance(headers, dict):
        return
    headers[LAST_TICK] = tick.isoformat()
    PeriodicTask.objects.filter(pk=task.pk, headers=task.headers).update(headers=json.dumps(headers))


def _cron_ticks(row: Any) -> Cron:
    cron = row.schedule  # celery's crontab, its fields expanded to sets, in the row's time zone
    return _cron(cron, cron.tz or dt_timezone.utc)


def _cron(crontab: Any, tz: tzinfo = dt_timezone.utc) -> Cron:
    """The ``Cron`` of a celery ``crontab`` (its fields expanded to sets)."""
    minute, hour, day_of_month, month_of_year, day_of_week = (frozenset(getattr(crontab, f)) for f in _CRON_FIELDS)
    return Cron(minute, hour, day_of_month, month_of_year, day_of_week, tz=tz)


# Checks: everything is refused before anything is written -----------------------------------


def _check_name(name: Any) -> None:
    limit = engine_schedules.MAX_NAME_LENGTH
    if not isinstance(name, str) or not name.strip() or len(name) > limit:
        raise exceptions.ScheduleError(
            "INVALID_SCHEDULE", f"name: {name!r} is not a non-blank string of at most {limit} characters"
        )
    fault = values.text_fault(name)
    if fault is not None:
        raise exceptions.ScheduleError("INVALID_SCHEDULE", f"name: {fault}")


def _timing(crontab: Any, every: Any) -> Every | dict[str, str]:
    """The schedule's ``Every``, or its crontab's five fields."""
    if (crontab is None) == (every is None):
        raise exceptions.ScheduleError(
            "INVALID_SCHEDULE", "give one of crontab= (\"*/5 * * * *\") or every= (seconds), not both or neither"
        )
    if every is not None:
        whole = isinstance(every, (int, float)) and not isinstance(every, bool) and float(every).is_integer()
        if whole and every > _MAX_EVERY:
            raise exceptions.ScheduleError(
                "INVALID_SCHEDULE", f"every: {every!r} is more than {_MAX_EVERY:,} seconds; use a crontab"
            )
        try:
            return Every(int(every) if whole else every)
        except ValueError as exc:
            raise exceptions.ScheduleError("INVALID_SCHEDULE", str(exc)) from None
    return _crontab_fields(crontab)


def _crontab_fields(crontab: Any) -> dict[str, str]:
    from celery.schedules import ParseException
    from celery.schedules import crontab as celery_crontab

    fields = crontab.split() if isinstance(crontab, str) else []
    if len(fields) != 5:
        raise exceptions.ScheduleError(
            "INVALID_SCHEDULE",
            f"crontab: {crontab!r} is not five fields: minute hour day-of-month month day-of-week (\"0 2 * * *\")",
        )
    named = dict(zip(_CRON_FIELDS, fields))
    try:
        parsed = celery_crontab(**named)
    except (ValueError, ParseException) as exc:
        raise exceptions.ScheduleError("INVALID_SCHEDULE", f"crontab: {crontab!r}: {exc}") from None
    cron = _cron(parsed)
    if cron.latest(datetime(9000, 1, 1, tzinfo=dt_timezone.utc)) is None:
        raise exceptions.ScheduleError("INVALID_SCHEDULE", f"crontab: {crontab!r} matches no day (ever)")
    return named


def _checked_start(name: str, workflow: Any, params: Any) -> StartRequest:
    """What a tick's start would refuse, refused now (``start``'s own checks)."""
    from durableflow import operations

    verbs = operations.engine()
    key = engine_schedules.tick_key(name, timezone.now())
    try:
        request = prepare_start(
            verbs.registry, workflow, params, idempotency_key=key, max_payload_bytes=verbs.settings.max_payload_bytes
        )
    except exceptions.WorkflowStartError as exc:
        raise exceptions.ScheduleError(exc.code, exc.message, **exc.detail) from None
    return request


def _schedule_rows(alias: str, timing: Every | dict[str, str]):
    """The ``(IntervalSchedule, CrontabSchedule)`` rows for ``timing``, one of them None (made if
    missing; django-celery-beat shares them between periodic tasks)."""
    from django_celery_beat.models import CrontabSchedule, IntervalSchedule

    if isinstance(timing, Every):
        found = {"every": timing.seconds, "period": IntervalSchedule.SECONDS}
        row = IntervalSchedule.objects.using(alias).filter(**found).order_by("pk").first()
        return row or IntervalSchedule.objects.using(alias).create(**found), None
    found = {**timing, "timezone": CrontabSchedule._meta.get_field("timezone").get_default()}
    row = CrontabSchedule.objects.using(alias).filter(**found).order_by("pk").first()
    return None, row or CrontabSchedule.objects.using(alias).create(**found)


def _timing_key(timing: Every | dict[str, str]) -> tuple:
    """What a timing names, comparable with ``_timing_of`` (an hour is 3,600 seconds)."""
    if isinstance(timing, Every):
        return ("every", timing.seconds)
    from django_celery_beat.models import CrontabSchedule

    default = CrontabSchedule._meta.get_field("timezone").get_default()
    return ("crontab", *(timing[field] for field in _CRON_FIELDS), str(default))


def _timing_of(task: PeriodicTask) -> tuple | None:
    if task.solar_id is not None or task.clocked_id is not None:
        return None
    if task.interval is not None:
        return ("every", task.interval.schedule.run_every.total_seconds())
    if task.crontab is not None:
        return ("crontab", *(getattr(task.crontab, field) for field in _CRON_FIELDS), str(task.crontab.timezone))
    return None


def _same(task: PeriodicTask, field: str, value: Any) -> bool:
    if field in ("interval", "crontab", "solar", "clocked"):
        return getattr(task, f"{field}_id") == getattr(value, "pk", None)
    return getattr(task, field) == value
