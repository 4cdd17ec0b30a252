"""Deadlines on real worker and beat processes: a run asleep past its deadline is cancelled by the
sweep beat sends, its compensation runs once, and nothing runs it again.

Times are read off the database's own rows (the deadline, the compensation's record), not off
the test's clock."""

from __future__ import annotations

import durableflow
from durableflow import tasks
from durableflow.conf import df_settings
from durableflow.models import Execution, StepRecord
from tests.helpers import uid, wait_for, wait_status
from tests.testapp.models import Marker

# What a loaded 2-core machine may add to the sweep's interval (beat's tick, the worker's turn).
SLACK = 5.0


def _markers(tag: str) -> list[str]:
    names = Marker.objects.filter(name__startswith=f"{tag}:").order_by("id").values_list("name", flat=True)
    return [name[len(tag) + 1 :] for name in names]


def test_a_run_asleep_at_its_deadline_is_cancelled_and_compensated_once(workers, live_db):
    queue, tag = uid("q"), uid("deadline")
    worker = workers(queue)
    execution = durableflow.start("t.deadline-nap", {"tag": tag}, queue=queue, deadline=2)
    assert execution.deadline_at is not None

    done = wait_status(execution.id, "cancelled", timeout=60)

    assert done.error["code"] == "DEADLINE_EXCEEDED"
    assert _markers(tag) == ["booked", "undo-booked"]
    assert [c["step"] for c in done.compensations] == ["booked"]
    # The cancel came within one sweep interval of the deadline (its compensation's record
    # starts once the sweep has asked for it).
    undo = StepRecord.objects.get(execution_id=execution.id, key="$compensate:booked")
    late = (undo.started_at - done.deadline_at).total_seconds()
    assert late <= df_settings.SWEEP_INTERVAL + SLACK, f"cancelled {late:.2f} s after the deadline"
    assert abs((done.deadline_at - done.created_at).total_seconds() - 2) < 1

    # Whatever arrives later, it never runs again.
    for _ in range(3):
        tasks.deliver.apply_async((execution.id,), queue=queue)
    wait_for(
        lambda: worker.count_in_log(f"delivery skipped: execution {execution.id}") >= 3,
        what="the late messages to be handled",
    )
    assert _markers(tag) == ["booked", "undo-booked"]
    assert Execution.objects.get(pk=execution.id).status == "cancelled"
