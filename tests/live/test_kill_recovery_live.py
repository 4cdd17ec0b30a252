"""A pool child SIGKILLed mid-step, with the default 60 s lease: its step runs again within seconds.

A worker with two pool processes runs ``t.crash``, whose ``slow`` step marks its start and
holds (on its first attempt only); the test SIGKILLs the process running it, ``KILLS`` times,
and measures from each kill to the step's second start (the marker's own time, written by the
worker: the kill and the marker read the same machine's clock). The 95th percentile must be
at most ``BOUND`` seconds, where waiting out the lease would take a minute.

The bound, and why it holds with room to spare (a behaviour, not a benchmark):

- PostgreSQL + Redis: Celery hands the killed child's message out again at once (``acks_late``
  + ``reject_on_worker_lost``), once the worker's master has reaped the child. The other pool
  process claims: the lease is held, its holder's process no longer exists on this machine, so
  it takes the lease over in the same delivery (two statements more) and replays one recorded
  step before the slow one starts again. Measured here: a few tenths of a second.
- The embedded default (SQLite + the filesystem transport) loses the killed child's message.
  The sweep, which beat sends every second (``SWEEP_INTERVAL``), finds the lease of a process
  gone from its machine, gives it back and sends the delivery again; the worker polls its queue
  every 0.1 s. Celery's synchronous pool (this transport's) keeps the killed child's slot busy
  for ``CELERY_WORKER_LOST_WAIT`` (1 s in the project's settings; Celery's default of 10 s
  stalled every second kill for 10 s here, both slots lost). Expected: one to two and a half
  seconds; measured here: p95 about 2.3 s.

``BOUND`` = 5 s is twice the slower of the two; with the lease waited out it would be 60 s or
more.
"""

from __future__ import annotations

import math
import os
import signal

from django.utils import timezone

import durableflow
from durableflow.models import Execution, StepRecord
from tests.helpers import uid, wait_for, wait_status
from tests.testapp.models import Marker

KILLS = 12
BOUND = 5.0
DEFAULT_LEASE = 60


def _p95(samples: list[float]) -> float:
    """The nearest-rank 95th percentile (of 12 samples: the largest)."""
    ordered = sorted(samples)
    return ordered[math.ceil(0.95 * len(ordered)) - 1]


def test_a_killed_pool_child_s_step_resumes_within_seconds_with_the_default_lease(cluster, live_db):
    queue = uid("kill")
    worker = cluster.worker(queue, concurrency=2, env={"DURABLEFLOW_TEST_LEASE_SECONDS": str(DEFAULT_LEASE)})
    recoveries = []
    try:
        for _ in range(KILLS):
            tag = uid("kill")
            execution = durableflow.start("t.crash", {"tag": tag, "hold": DEFAULT_LEASE * 2}, queue=queue)
            first = wait_for(lambda: Marker.objects.filter(name=f"{tag}:slow").first(), what="the slow step to start")

            worker_pid = first.pid
            killed_at = timezone.now()
            os.kill(worker_pid, signal.SIGKILL)

            again = wait_for(
                lambda: Marker.objects.filter(name=f"{tag}:slow").exclude(pk=first.pk).first(),
                timeout=DEFAULT_LEASE / 2,
                what="the slow step to start again",
            )
            recoveries.append((again.created_at - killed_at).total_seconds())
            done = wait_status(execution.id, timeout=DEFAULT_LEASE / 2)
            assert done.deliveries == 2 and again.pid != worker_pid
            keys = sorted(StepRecord.objects.filter(execution_id=execution.id).values_list("key", flat=True))
            assert keys == ["after", "before", "slow"]
    finally:
        cluster.stop(worker)

    summary = ", ".join(f"{seconds:.2f}" for seconds in sorted(recoveries))
    assert len(recoveries) == KILLS
    assert _p95(recoveries) <= BOUND, f"seconds from each kill to the step's next start: {summary}"
    print(f"kill recovery (s), {KILLS} kills, p95 {_p95(recoveries):.2f}: {summary}")
    assert Execution.objects.filter(queue=queue).exclude(status="completed").count() == 0
