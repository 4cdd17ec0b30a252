"""A step that kills its worker process every time, on real workers: its run is failed with
``DELIVERY_LOST`` after ``MAX_LOST_DELIVERIES`` + 1 deliveries that died, and the worker goes on
with the others. Bodies are counted by the rows they write before they kill their process."""

from __future__ import annotations

import durableflow
from durableflow.models import Execution
from tests.helpers import uid, wait_status
from tests.testapp.models import Marker

LIMIT = 3


def test_a_step_that_always_kills_its_process_fails_its_run_and_spares_the_others(workers, live_db):
    queue, tag = uid("q"), uid("poison")
    workers(queue, concurrency=2, env={"DURABLEFLOW_TEST_MAX_LOST_DELIVERIES": str(LIMIT)})
    poisoned = durableflow.start("t.poison", {"tag": tag}, queue=queue)

    failed = wait_status(poisoned.id, "failed", timeout=120)

    assert failed.error["code"] == "DELIVERY_LOST"
    # Each delivery that died ran the step once; the one after the limit ran nothing.
    assert Marker.count(f"{tag}:before") == 1
    assert Marker.count(f"{tag}:poison") == LIMIT + 1
    assert failed.deliveries == LIMIT + 2
    assert (failed.lease_token, failed.lease_expires_at) == (None, None)
    # The worker still consumes: runs started after it complete.
    others = [durableflow.start("t.ping", queue=queue).id for _ in range(5)]
    for execution_id in others:
        wait_status(execution_id, timeout=60)
    assert Execution.objects.filter(pk__in=others, status="completed").count() == 5
