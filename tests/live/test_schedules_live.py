"""Schedules on real beat and worker processes: an every-2-seconds schedule starts one execution per
tick, with one beat or two at once; with beat stopped for 10 s, ``catch_up="one"`` starts one
execution for the ticks it missed.

Ticks are read off the executions' idempotency keys and times off the database's clock (what
the tick verb reads), never off the test's own; every wait polls the database."""

from __future__ import annotations

from datetime import datetime, timedelta

import durableflow
from durableflow.models import Execution
from durableflow.orm import OrmStorage
from tests.helpers import uid, wait_for

EVERY = 2
WINDOW = 10  # seconds: five ticks of an every-2-seconds schedule


def _now() -> datetime:
    return OrmStorage().now()


def _runs(name: str) -> list[tuple[datetime, datetime]]:
    """(tick, created_at) of each execution the schedule started, by tick."""
    prefix = f"schedule:{name}:"
    rows = Execution.objects.filter(idempotency_key__startswith=prefix).values_list("idempotency_key", "created_at")
    return sorted((datetime.fromisoformat(key[len(prefix) :]), created) for key, created in rows)


def _wait_until(moment: datetime, what: str) -> None:
    wait_for(lambda: _now() >= moment, timeout=WINDOW * 6, what=what)


def _ticks_in_window(name: str) -> list[datetime]:
    """Let the schedule run for WINDOW seconds from its start; the ticks it started in them."""
    start = durableflow.schedule(name, "t.return-params", {"schedule": name}, every=EVERY).start_time
    end = start + timedelta(seconds=WINDOW)
    # Until the window's last tick has started (a tick missed before it is made up by the next).
    wait_for(lambda: any(tick > end - timedelta(seconds=EVERY) for tick, _ in _runs(name)),
             timeout=WINDOW * 6, what=f"schedule {name} to reach the end of its window")  # fmt: skip
    durableflow.unschedule(name)
    return [tick for tick, _ in _runs(name) if start < tick <= end]


def test_an_every_two_seconds_schedule_starts_one_execution_per_tick(cluster, live_db):
    name = uid("every2")
    try:
        ticks = _ticks_in_window(name)
    finally:
        durableflow.unschedule(name)
    assert abs(len(ticks) - WINDOW // EVERY) <= 1, ticks
    assert all((later - earlier).total_seconds() == EVERY for earlier, later in zip(ticks, ticks[1:])), ticks


def test_two_beats_at_once_start_each_tick_once(cluster, live_db):
    name = uid("twobeats")
    second = cluster.beat()
    try:
        wait_for(lambda: "beat: Starting..." in second.log(), timeout=60, what="the second beat to start")
        ticks = _ticks_in_window(name)
    finally:
        durableflow.unschedule(name)
        cluster.stop(second)
    assert abs(len(ticks) - WINDOW // EVERY) <= 1, ticks
    assert len(set(ticks)) == len(ticks)
    # Both beats sent the schedule's ticks: each tick was sent about twice and started once.
    sent = [process.count_in_log(f"Sending due task {name}") for process in (cluster.beat_process, second)]
    assert min(sent) >= WINDOW // EVERY - 2, sent


def test_after_beat_was_down_catch_up_one_starts_one_execution_for_the_missed_ticks(cluster, live_db):
    name = uid("catchup")
    durableflow.schedule(name, "t.return-params", {"schedule": name}, every=EVERY, catch_up="one")
    try:
        wait_for(lambda: len(_runs(name)) >= 2, timeout=60, what=f"schedule {name} to start two runs")
        cluster.stop(cluster.beat_process)
        stopped = _now()
        before = _runs(name)
        _wait_until(stopped + timedelta(seconds=WINDOW), "beat to have been down for 10 s")
        assert _runs(name) == before  # nothing ticks without beat
        restarted = _now()
        cluster.beat_process = cluster.beat()
        # The first tick after the restart, and one more on schedule after it.
        wait_for(lambda: len({created for _, created in _runs(name) if created > restarted}) >= 2,
                 timeout=60, what=f"schedule {name} to tick twice after the restart")  # fmt: skip
    finally:
        durableflow.unschedule(name)
        if not cluster.beat_process.alive():
            cluster.beat_process = cluster.beat()
    runs = _runs(name)
    last_before = max(tick for tick, created in runs if created <= restarted)
    after = [(tick, created) for tick, created in runs if created > restarted]
    first_tick_at = min(created for _, created in after)
    first = sorted(tick for tick, created in after if (created - first_tick_at).total_seconds() < 0.5)
    # That tick started two runs in one transaction: one for the ticks missed, and its own.
    assert len(first) == 2 and (first[1] - first[0]).total_seconds() == EVERY, runs
    missed = [tick for tick, _ in runs if last_before < tick < first[1]]
    gap = (first[1] - last_before).total_seconds() / EVERY - 1
    assert gap >= WINDOW // EVERY - 1, f"only {gap} ticks were missed: {runs}"
    assert missed == [first[0]], runs
