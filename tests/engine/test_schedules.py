"""Schedules: ``durableflow.schedule`` / ``unschedule`` as django-celery-beat periodic tasks, and the
``tick`` verb held against both storages: one execution per tick however often it is sent, the
catch-up policies after downtime on a controlled clock, and bad input refused with nothing written."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone
from zoneinfo import ZoneInfo

import pytest
from django_celery_beat.models import CrontabSchedule, IntervalSchedule, PeriodicTask

import durableflow
from durableflow import ScheduleError, dispatch, schedules, tasks
from durableflow.engine.schedules import MAX_CATCH_UP, MAX_NAME_LENGTH, Cron, Every, due_ticks, tick_key
from durableflow.models import Execution

UTC = timezone.utc


@durableflow.workflow("t.scheduled")
def scheduled(ctx, params):
    return params


def _at(text: str) -> datetime:
    return datetime.fromisoformat(text).replace(tzinfo=UTC)


def _cron(minute="*", hour="*", day_of_month="*", month_of_year="*", day_of_week="*", tz=UTC) -> Cron:
    from celery.schedules import crontab

    parsed = crontab(
        minute=minute, hour=hour, day_of_month=day_of_month, month_of_year=month_of_year, day_of_week=day_of_week
    )
    fields = ("minute", "hour", "day_of_month", "month_of_year", "day_of_week")
    return Cron(*(frozenset(getattr(parsed, field)) for field in fields), tz=tz)


# The ticks a schedule names -----------------------------------------------------------------


def test_every_ticks_at_multiples_of_its_interval_since_the_epoch():
    assert Every(2).latest(_at("2026-12-03 06:00:03.9")) == _at("2026-12-03 06:00:02")
    assert Every(3600).latest(_at("2026-12-03 06:59:59")) == _at("2026-12-03 06:00:00")
    assert Every(3600).previous(_at("2026-12-03 06:00:00")) == _at("2026-12-03 05:00:00")
    # A tick is a moment, not when a message came: two beats a second apart name the same one.
    assert Every(2).latest(_at("2026-12-03 06:00:02.1")) == Every(2).latest(_at("2026-12-03 06:00:03.8"))


@pytest.mark.parametrize("seconds", [0, -1, 1.5, True, "2"])
def test_every_refuses_what_is_not_a_whole_number_of_seconds_above_zero(seconds):
    with pytest.raises(ValueError, match="whole number of seconds above 0"):
        Every(seconds)


def test_a_crontab_ticks_at_its_latest_matching_minute():
    every_five = _cron(minute="*/5")
    assert every_five.latest(_at("2026-12-03 06:07:30")) == _at("2026-12-03 06:05")
    assert every_five.latest(_at("2026-12-03 06:05:00")) == _at("2026-12-03 06:05")
    assert every_five.previous(_at("2026-12-03 06:05")) == _at("2026-12-03 06:00")
    nightly = _cron(minute="0", hour="2")
    assert nightly.latest(_at("2026-12-03 01:59")) == _at("2026-12-02 02:00")
    # Celery's semantics: day of month and day of week must both match (Monday the 1st).
    monday_first = _cron(minute="0", hour="0", day_of_month="1", day_of_week="1")
    assert monday_first.latest(_at("2026-12-03 00:00")) == _at("2026-06-01 00:00")


def test_a_crontab_reads_its_fields_in_its_timezone():
    paris = _cron(minute="0", hour="2", tz=ZoneInfo("Europe/Paris"))
    assert paris.latest(_at("2026-12-03 06:00")) == _at("2026-12-03 01:00")  # 02:00 in Paris, winter
    assert paris.latest(_at("2026-07-03 06:00")) == _at("2026-07-03 00:00")  # summer time


def test_the_tick_key_names_the_schedule_and_the_tick_in_utc():
    tick = datetime(2026, 12, 3, 7, 0, tzinfo=ZoneInfo("Europe/Paris"))
    assert tick_key("nightly", tick) == "schedule:nightly:2026-12-03T06:00:00+00:00"
    assert len(tick_key("n" * MAX_NAME_LENGTH, tick)) == 200


# Which ticks a tick starts ------------------------------------------------------------------


def _due(catch_up, now, started, floor=None, ticks=Every(2)):
    asked = []

    def was_started(tick):
        asked.append(tick)
        return tick in started

    return due_ticks(ticks, now, catch_up=catch_up, floor=floor, started=was_started), asked


def test_an_on_time_tick_starts_its_own_execution_only():
    now = _at("2026-12-03 06:00:10.5")
    for catch_up in ("one", "none", "all"):
        due, _ = _due(catch_up, now, started={_at("2026-12-03 06:00:08")})
        assert due == [_at("2026-12-03 06:00:10")]


def test_after_downtime_the_policy_decides_what_the_missed_ticks_start():
    now = _at("2026-12-03 06:00:10.5")
    started = {_at("2026-12-03 06:00:02")}  # 04, 06, 08 were missed
    one, asked = _due("one", now, started)
    assert one == [_at("2026-12-03 06:00:08"), _at("2026-12-03 06:00:10")]
    assert asked == [_at("2026-12-03 06:00:08")]  # one look back, not a walk to the last run
    none, asked = _due("none", now, started)
    assert none == [_at("2026-12-03 06:00:10")] and asked == []
    every, _ = _due("all", now, started)
    assert every == [_at(f"2026-12-03 06:00:{s:02}") for s in (4, 6, 8, 10)]


def test_ticks_before_the_floor_are_never_missed_or_started():
    now = _at("2026-12-03 06:00:10.5")
    floor = _at("2026-12-03 06:00:07")
    assert _due("all", now, set(), floor=floor)[0] == [_at("2026-12-03 06:00:08"), _at("2026-12-03 06:00:10")]
    assert _due("one", now, set(), floor=_at("2026-12-03 06:00:10"))[0] == [_at("2026-12-03 06:00:10")]
    assert _due("one", now, set(), floor=_at("2026-12-03 06:00:10.2"))[0] == []


def test_catching_up_on_every_tick_is_bounded():
    now = _at("2026-12-03 06:00:00")
    due, _ = _due("all", now, set(), ticks=Every(1))
    assert len(due) == MAX_CATCH_UP + 1 and due[-1] == now


# The tick verb on both storages -------------------------------------------------------------


def _keys(backend, name):
    storage = backend.storage
    prefix = f"schedule:{name}:"
    if backend.name == "memory":
        keys = [e.idempotency_key for e in storage.tables.executions.values()]
    else:
        keys = list(Execution.objects.values_list("idempotency_key", flat=True))
    return sorted(key for key in keys if key and key.startswith(prefix))


def _to_grid(backend, seconds, offset=0.5):
    """Move the clock just past the next multiple of ``seconds`` (plus ``offset``)."""
    now = backend.now().timestamp()
    backend.advance(seconds - now % seconds + offset)


def test_the_same_tick_sent_twice_starts_one_execution(backend):
    _to_grid(backend, 60)
    floor = backend.now() - timedelta(seconds=1)
    first = backend.engine.tick("twice", "t.scheduled", {"n": 1}, Every(60), floor=floor)
    again = backend.engine.tick("twice", "t.scheduled", {"n": 1}, Every(60), floor=floor)
    backend.advance(30)  # a late copy of the message: still the same tick
    late = backend.engine.tick("twice", "t.scheduled", {"n": 1}, Every(60), floor=floor)
    assert [e.id for e in first] == [e.id for e in again] == [e.id for e in late]
    assert len(_keys(backend, "twice")) == 1
    execution = backend.get(first[0].id)
    assert execution.params == {"n": 1} and execution.workflow == "t.scheduled"
    assert execution.idempotency_key == tick_key("twice", Every(60).latest(backend.now()))


def test_a_tick_after_params_changed_keeps_the_execution_it_started(backend):
    _to_grid(backend, 60)
    floor = backend.now() - timedelta(seconds=1)
    first = backend.engine.tick("edited", "t.scheduled", {"n": 1}, Every(60), floor=floor)
    again = backend.engine.tick("edited", "t.scheduled", {"n": 2}, Every(60), floor=floor)
    assert [e.id for e in again] == [e.id for e in first]
    assert backend.get(first[0].id).params == {"n": 1}


def test_ticks_recorded_as_started_are_not_missed_when_their_executions_are_gone(backend):
    _to_grid(backend, 60)
    floor = backend.now() - timedelta(hours=1)
    last = Every(60).latest(backend.now()) - timedelta(minutes=1)  # its run was pruned since
    started = backend.engine.tick("pruned", "t.scheduled", None, Every(60), floor=floor, last=last)
    assert len(started) == 1 and _keys(backend, "pruned") == [tick_key("pruned", last + timedelta(minutes=1))]
    again = backend.engine.tick("pruned", "t.scheduled", None, Every(60), floor=floor, last=last + timedelta(minutes=1))
    assert again == []  # the current tick, recorded: a re-sent message starts nothing
    everything = backend.engine.tick("pruned", "t.scheduled", None, Every(60), floor=floor, catch_up="all")
    assert len(everything) == 60  # without the record, the hour's ticks look missed


@pytest.mark.parametrize(("catch_up", "after_downtime"), [("one", 2), ("none", 1), ("all", 5)])
def test_catch_up_after_downtime_on_a_controlled_clock(backend, catch_up, after_downtime):
    name = f"down-{catch_up}"
    _to_grid(backend, 60)
    floor = backend.now() - timedelta(seconds=1)

    def tick():
        return backend.engine.tick(name, "t.scheduled", None, Every(60), catch_up=catch_up, floor=floor)

    tick()
    backend.advance(60)
    tick()
    assert len(_keys(backend, name)) == 2
    backend.advance(5 * 60)  # four ticks missed, the fifth is the current one
    assert len(tick()) == after_downtime
    assert len(_keys(backend, name)) == 2 + after_downtime
    backend.advance(60)
    assert len(tick()) == 1  # back on time: the tick before it started
    assert len(_keys(backend, name)) == 3 + after_downtime


def test_a_tick_refuses_an_unknown_policy_or_workflow(backend):
    with pytest.raises(ScheduleError) as caught:
        backend.engine.tick("bad", "t.scheduled", None, Every(60), catch_up="some", floor=None)
    assert caught.value.code == "INVALID_SCHEDULE"
    with pytest.raises(durableflow.WorkflowStartError) as caught:
        backend.engine.tick("bad", "t.no-such-workflow", None, Every(60), floor=None)
    assert caught.value.code == "UNKNOWN_WORKFLOW"
    assert _keys(backend, "bad") == []


# schedule() and unschedule(): the periodic task --------------------------------------------


@pytest.mark.django_db
def test_schedule_creates_a_periodic_task_that_runs_the_tick():
    task = durableflow.schedule("reports", scheduled, {"kind": "daily"}, every=300)
    row = PeriodicTask.objects.get(name="reports")
    assert row.pk == task.pk and row.task == dispatch.TICK == "durableflow.tick"
    assert json.loads(row.kwargs) == {
        "schedule": "reports",
        "workflow": "t.scheduled",
        "params": {"kind": "daily"},
        "catch_up": "one",
    }
    assert (row.interval.every, row.interval.period, row.crontab) == (300, IntervalSchedule.SECONDS, None)
    assert row.enabled and row.start_time is not None and row.queue == "durableflow"


@pytest.mark.django_db
def test_schedule_with_a_crontab():
    task = durableflow.schedule("nightly", "t.scheduled", crontab="0 2 * * 1-5", catch_up="none")
    cron = task.crontab
    assert (cron.minute, cron.hour, cron.day_of_month, cron.month_of_year, cron.day_of_week) == (
        "0",
        "2",
        "*",
        "*",
        "1-5",
    )
    assert task.interval is None and json.loads(task.kwargs)["catch_up"] == "none"


@pytest.mark.django_db
def test_schedule_again_updates_in_place_and_the_same_call_writes_nothing():
    first = durableflow.schedule("hourly", "t.scheduled", {"n": 1}, every=3600)
    stamp = PeriodicTask.objects.get(pk=first.pk).date_changed
    same = durableflow.schedule("hourly", "t.scheduled", {"n": 1}, every=3600)
    assert PeriodicTask.objects.get(pk=first.pk).date_changed == stamp and same.pk == first.pk
    # New params keep the timing and its start; a new timing counts from now.
    durableflow.schedule("hourly", "t.scheduled", {"n": 2}, every=3600)
    row = PeriodicTask.objects.get(pk=first.pk)
    assert json.loads(row.kwargs)["params"] == {"n": 2} and row.start_time == first.start_time
    durableflow.schedule("hourly", "t.scheduled", {"n": 2}, crontab="0 * * * *")
    row = PeriodicTask.objects.get(pk=first.pk)
    assert row.interval is None and row.crontab.minute == "0" and row.start_time > first.start_time
    assert PeriodicTask.objects.filter(name="hourly").count() == 1


@pytest.mark.django_db
def test_unschedule_deletes_it_and_keeps_its_executions():
    durableflow.schedule("gone", "t.scheduled", every=60)
    PeriodicTask.objects.filter(name="gone").update(start_time=datetime(2000, 1, 1, tzinfo=UTC))
    started = schedules.start_due("gone", "t.scheduled")
    assert durableflow.unschedule("gone") is True
    assert not PeriodicTask.objects.filter(name="gone").exists()
    assert durableflow.unschedule("gone") is False
    assert Execution.objects.filter(pk=started[0].pk).exists()
    # A tick still on its way after that starts nothing.
    assert schedules.start_due("gone", "t.scheduled") == []


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("arguments", "code", "message"),
    [
        ({"every": 60, "crontab": "* * * * *"}, "INVALID_SCHEDULE", "not both or neither"),
        ({}, "INVALID_SCHEDULE", "not both or neither"),
        ({"every": 0}, "INVALID_SCHEDULE", "above 0"),
        ({"every": -5}, "INVALID_SCHEDULE", "above 0"),
        ({"every": 2.5}, "INVALID_SCHEDULE", "whole number"),
        ({"every": "60"}, "INVALID_SCHEDULE", "whole number"),
        ({"every": 2**31}, "INVALID_SCHEDULE", "use a crontab"),
        ({"crontab": "*/5 * * *"}, "INVALID_SCHEDULE", "five fields"),
        ({"crontab": "61 * * * *"}, "INVALID_SCHEDULE", "crontab"),
        ({"crontab": "every day"}, "INVALID_SCHEDULE", "five fields"),
        ({"crontab": "0 0 31 2 *"}, "INVALID_SCHEDULE", "never occurs|matches no day"),
        ({"every": 60, "catch_up": "some"}, "INVALID_SCHEDULE", "catch_up"),
        ({"every": 60, "workflow": "t.no-such-workflow"}, "UNKNOWN_WORKFLOW", "No workflow"),
        ({"every": 60, "params": {"at": datetime(2026, 1, 1)}}, "INVALID_PARAMS", "params"),
        ({"every": 60, "params": float("nan")}, "INVALID_PARAMS", "params"),
        ({"every": 60, "name": ""}, "INVALID_SCHEDULE", "name"),
        ({"every": 60, "name": "n" * (MAX_NAME_LENGTH + 1)}, "INVALID_SCHEDULE", "name"),
        ({"every": 60, "name": "bad\x00name"}, "INVALID_SCHEDULE", "name"),
    ],
)
def test_bad_input_is_refused_with_a_code_and_nothing_is_written(arguments, code, message):
    arguments = {"name": "refused", "workflow": "t.scheduled", **arguments}
    counts = (PeriodicTask.objects.count(), IntervalSchedule.objects.count(), CrontabSchedule.objects.count())
    with pytest.raises(ScheduleError, match=message) as caught:
        name, workflow, params = arguments.pop("name"), arguments.pop("workflow"), arguments.pop("params", None)
        durableflow.schedule(name, workflow, params, **arguments)
    assert caught.value.code == code
    assert (PeriodicTask.objects.count(), IntervalSchedule.objects.count(), CrontabSchedule.objects.count()) == counts


@pytest.mark.django_db
def test_another_periodic_task_of_that_name_is_left_alone():
    interval = IntervalSchedule.objects.create(every=10, period=IntervalSchedule.SECONDS)
    PeriodicTask.objects.create(name="mine", task="myapp.report", interval=interval)
    with pytest.raises(ScheduleError, match="not a durableflow schedule"):
        durableflow.schedule("mine", "t.scheduled", every=60)
    with pytest.raises(ScheduleError, match="not a durableflow schedule"):
        durableflow.unschedule("mine")
    assert PeriodicTask.objects.get(name="mine").task == "myapp.report"


# The tick task, as beat sends it ----------------------------------------------------------


def _tick(name: str) -> int:
    """What a worker does with beat's message: the task with the row's kwargs."""
    return tasks.tick.run(**json.loads(PeriodicTask.objects.get(name=name).kwargs))


@pytest.mark.django_db
def test_the_tick_task_starts_one_execution_per_tick():
    durableflow.schedule("ticking", "t.scheduled", {"n": 1}, every=3600)
    PeriodicTask.objects.filter(name="ticking").update(start_time=datetime(2000, 1, 1, tzinfo=UTC))
    assert _tick("ticking") == 2  # the current tick, and one for the missed ones (catch_up="one")
    hour = Every(3600).latest(datetime.now(UTC))
    # The row keeps the latest tick started (a header beat sends along).
    assert json.loads(PeriodicTask.objects.get(name="ticking").headers)["durableflow_last_tick"] == hour.isoformat()
    assert _tick("ticking") == 0  # sent again: that tick is recorded as started
    executions = Execution.objects.filter(idempotency_key__startswith="schedule:ticking:")
    assert executions.count() == 2
    assert sorted(executions.values_list("idempotency_key", flat=True)) == [
        tick_key("ticking", hour - timedelta(hours=1)),
        tick_key("ticking", hour),
    ]
    assert all(execution.params == {"n": 1} for execution in executions)


@pytest.mark.django_db
def test_the_tick_follows_the_schedule_as_edited_in_the_admin():
    durableflow.schedule("edited", "t.scheduled", every=3600)
    row = PeriodicTask.objects.get(name="edited")
    # The admin's form saves the row with another schedule (a crontab every minute).
    row.interval, row.crontab = None, CrontabSchedule.objects.create(minute="*")
    row.start_time = datetime(2000, 1, 1, tzinfo=UTC)
    row.save()
    assert _tick("edited") == 2
    minute = _cron().latest(datetime.now(UTC))
    keys = set(Execution.objects.filter(idempotency_key__startswith="schedule:edited:").values_list(
        "idempotency_key", flat=True))  # fmt: skip
    assert tick_key("edited", minute) in keys
    # Keyword arguments edited into something a start refuses: logged, nothing started.
    assert tasks.tick.run("edited", "t.no-such-workflow") == 0
    assert tasks.tick.run("edited", "t.scheduled", catch_up="most") == 0
    # Disabled in the admin: its ticks start nothing.
    row.enabled = False
    row.save()
    assert _tick("edited") == 0


@pytest.mark.django_db
def test_a_tick_whose_run_was_pruned_is_not_caught_up_again():
    durableflow.schedule("monthly", "t.scheduled", every=3600)
    PeriodicTask.objects.filter(name="monthly").update(start_time=datetime(2000, 1, 1, tzinfo=UTC))
    assert _tick("monthly") == 2
    Execution.objects.filter(idempotency_key__startswith="schedule:monthly:").delete()  # pruned
    assert _tick("monthly") == 0
    # The record is only a help: cleared in the admin, the keys decide again.
    PeriodicTask.objects.filter(name="monthly").update(headers="{}")
    assert _tick("monthly") == 2


@pytest.mark.django_db
def test_a_new_schedule_catches_up_on_nothing_before_it_was_made():
    durableflow.schedule("fresh", "t.scheduled", every=1)
    # Its first tick is at or after the start time, and the ticks before it are not missed.
    row = PeriodicTask.objects.get(name="fresh")
    found = schedules.start_due("fresh", "t.scheduled")
    assert len(found) <= 1
    for execution in found:
        tick = datetime.fromisoformat(execution.idempotency_key.removeprefix("schedule:fresh:"))
        assert tick >= row.start_time


# WorkflowTester: a schedule's ticks on the manual clock -------------------------------------


def test_the_tester_ticks_a_schedule_on_its_clock():
    from durableflow.testing import WorkflowTester

    tester = WorkflowTester()
    first = tester.tick("nightly", "t.scheduled", {"n": 1}, crontab="0 2 * * *")
    assert len(first) == 1 and first[0].idempotency_key.startswith("schedule:nightly:")
    assert tester.tick("nightly", "t.scheduled", {"n": 1}, crontab="0 2 * * *") == first  # the same tick
    tester.advance(5 * 86400)  # four nights missed
    assert len(tester.tick("nightly", "t.scheduled", {"n": 1}, crontab="0 2 * * *")) == 2
    tester.advance(3 * 86400)
    assert len(tester.tick("nightly", "t.scheduled", {"n": 1}, crontab="0 2 * * *", catch_up="all")) == 3
    assert tester.run() == 6 and tester.result(first[0].id) == {"n": 1}
    with pytest.raises(ScheduleError, match="not both or neither"):
        tester.tick("nightly", "t.scheduled")


@pytest.mark.django_db
def test_the_same_timing_in_other_units_or_rows_is_not_a_change():
    hour = IntervalSchedule.objects.create(every=1, period=IntervalSchedule.HOURS)
    durableflow.schedule("units", "t.scheduled", every=3600)
    PeriodicTask.objects.filter(name="units").update(interval=hour)  # as chosen in the admin
    before = PeriodicTask.objects.get(name="units")
    durableflow.schedule("units", "t.scheduled", every=3600)
    after = PeriodicTask.objects.get(name="units")
    assert (after.interval_id, after.start_time, after.date_changed) == (hour.pk, before.start_time, before.date_changed)
