"""Rate limits on real worker processes: ``RateLimit(key, 5, 2.0)`` over 20 steps of several
executions on two workers admits at most 5 in any 2 seconds, whichever worker asks, runs each
body once, and makes the waiting steps wait durably (no worker holds them).

Admission times are the database's (journaled with each step), not the test's clock."""

from __future__ import annotations

from datetime import timedelta

import durableflow
from durableflow.engine.context import parse_iso
from durableflow.models import Execution, RateLimitAdmission, StepRecord
from tests.helpers import uid, wait_for, wait_status
from tests.testapp.models import Marker

LIMIT, WINDOW, RUNS, STEPS = 5, 2.0, 10, 2


def test_a_shared_limit_holds_across_two_workers(workers, live_db):
    queue, tag = uid("q"), uid("rl")
    workers(queue, concurrency=1)
    workers(queue, concurrency=1)
    runs = [
        durableflow.start("t.rate-limited", {"tag": tag, "run": n, "steps": STEPS}, queue=queue) for n in range(RUNS)
    ]

    # Steps over the limit wait durably: their executions are suspended, holding no worker.
    ids = [run.id for run in runs]
    wait_for(
        lambda: Execution.objects.filter(pk__in=ids, status="waiting", waiting_for__kind="rate_limit").exists(),
        timeout=60,
        what="a step to wait for its rate limit",
    )
    # ... so the same two workers run another workflow meanwhile, before the limited runs are done.
    ping = durableflow.start("t.ping", queue=queue)
    wait_status(ping.id, timeout=30)
    assert Execution.objects.filter(pk__in=ids).exclude(status="completed").exists()
    done = [wait_status(run.id, timeout=120) for run in runs]

    # Every step ran once (one marker per body), and the runs returned what their bodies did.
    names = list(Marker.objects.filter(name__startswith=f"{tag}:").values_list("name", flat=True))
    assert sorted(names) == sorted(f"{tag}:{n}:{i}" for n in range(RUNS) for i in range(STEPS))
    assert all(len(execution.result) == STEPS for execution in done)
    # The journaled admission times: never more than LIMIT in any WINDOW.
    records = StepRecord.objects.filter(execution_id__in=[run.id for run in runs], key__startswith="call-")
    times = sorted(parse_iso(record.meta["admitted_at"]) for record in records)
    assert len(times) == RUNS * STEPS
    span = timedelta(seconds=WINDOW)
    crowded = [(t, sum(1 for u in times if t <= u < t + span)) for t in times]
    assert max(count for _, count in crowded) <= LIMIT, crowded
    # 20 units at 5 per 2 s: the last is admitted at least 3 windows after the first.
    assert times[-1] - times[0] >= timedelta(seconds=3 * WINDOW)
    assert max(e.finished_at for e in done) - min(e.created_at for e in done) >= timedelta(seconds=3 * WINDOW)
    # The limiter's rows agree with the journal: one admission per step.
    rows = RateLimitAdmission.objects.filter(key=f"rl:{tag}")
    assert rows.count() == RUNS * STEPS and not rows.filter(admitted_at__isnull=True).exists()
    assert sorted(rows.values_list("admitted_at", flat=True)) == times
    # Refused steps came back in later deliveries (woken by the sweep when a unit freed).
    assert sum(execution.deliveries for execution in done) > RUNS
