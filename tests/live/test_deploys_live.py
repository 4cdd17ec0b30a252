"""A deploy under running executions, on real workers: runs wait for a signal on a worker with
the old code; the worker is restarted with the new code (``tests/testapp/deploys.py``, chosen
by ``DURABLEFLOW_TEST_DEPLOY``), and new runs start beside them.

- ``t.deploy-patched`` gains a step behind ``ctx.patched("audit")``: the runs started before the
  deploy replay the old branch, the new runs take the new one;
- ``t.deploy-versions`` gains a version 2 beside version 1: the runs of version 1 finish on it,
  new starts run version 2, on the same worker.

None stalls, and ``replay-check`` with the new code installed passes all of them."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

import durableflow
from durableflow.models import Execution, StepRecord
from tests.cluster import ROOT
from tests.helpers import uid, wait_for, wait_status
from tests.testapp import deploys
from tests.testapp.models import Marker

AFTER = {deploys.STAGE_VARIABLE: "after"}


def _wait_for_the_signal(ids: list[str], worker) -> None:
    def waiting() -> bool:
        rows = Execution.objects.filter(pk__in=ids)
        return sum(1 for row in rows if (row.waiting_for or {}).get("kind") == "signal") == len(ids)

    try:
        wait_for(waiting, timeout=60, what="the runs to wait for their signal")
    except AssertionError:
        states = list(Execution.objects.filter(pk__in=ids).values_list("status", "waiting_for", "error"))
        raise AssertionError(f"{states}\n{worker.log()[-3000:]}") from None


def _marks(tag: str) -> list[str]:
    names = Marker.objects.filter(name__startswith=f"{tag}:").order_by("id").values_list("name", flat=True)
    return [name[len(tag) + 1 :] for name in names]


def _replay_check(env: dict[str, str], workflow: str) -> subprocess.CompletedProcess:
    argv = [sys.executable, "manage.py", "durableflow", "replay-check", "--workflow", workflow]
    return subprocess.run(argv, cwd=ROOT, env={**env, **AFTER}, capture_output=True, text=True, timeout=120)


@pytest.fixture
def deployed():
    """The test process gets the deploy too (its starts choose the version); undone after."""
    yield lambda: deploys.install("after")
    deploys.install("before")


def test_runs_started_before_a_deploy_finish_on_their_code_and_new_runs_take_the_new(
    cluster, workers, live_db, deployed
):
    queue, tag = uid("q"), uid("deploy")
    old_worker = workers(queue, concurrency=2)
    old = [durableflow.start("t.deploy-patched", {"tag": f"{tag}-old{n}"}, queue=queue).id for n in range(3)]
    old_v1 = [durableflow.start("t.deploy-versions", {"tag": f"{tag}-one{n}"}, queue=queue).id for n in range(2)]
    _wait_for_the_signal(old + old_v1, old_worker)

    # The deploy: the worker restarts with the new code, and so does the process that starts runs.
    cluster.stop(old_worker)
    workers.started.remove(old_worker)
    deployed()
    new_worker = workers(queue, concurrency=2, env=AFTER)
    new = [durableflow.start("t.deploy-patched", {"tag": f"{tag}-new{n}"}, queue=queue).id for n in range(3)]
    new_v2 = [durableflow.start("t.deploy-versions", {"tag": f"{tag}-two{n}"}, queue=queue).id for n in range(2)]
    assert {Execution.objects.get(pk=i).version for i in new_v2} == {"2"}
    _wait_for_the_signal(new + new_v2, new_worker)

    checked = _replay_check(cluster.env, "t.deploy-patched")
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "6 executions checked, 0 would not replay" in checked.stdout  # this test's, and none else

    for execution_id in old + old_v1 + new + new_v2:
        durableflow.signal(execution_id, "go")
    done = {execution_id: wait_status(execution_id, "completed") for execution_id in old + old_v1 + new + new_v2}

    assert [done[i].result for i in old] == ["old"] * 3
    assert [done[i].result for i in new] == ["new"] * 3
    assert [done[i].result for i in old_v1] == ["1"] * 2 and [done[i].version for i in old_v1] == ["1"] * 2
    assert [done[i].result for i in new_v2] == ["2"] * 2
    for n in range(3):
        assert _marks(f"{tag}-old{n}") == ["reserve", "ship"]  # the old branch: no audit, no marker
        assert _marks(f"{tag}-new{n}") == ["reserve", "audit", "ship"]
    assert not StepRecord.objects.filter(execution_id__in=old, kind="patch").exists()
    assert StepRecord.objects.filter(execution_id__in=new, kind="patch").count() == 3
    assert _marks(f"{tag}-one0") == ["reserve", "ship"] and _marks(f"{tag}-two0") == ["ship-2"]
    # None stalled on the way: no delivery recorded an error, and the worker logged no stall.
    assert all(execution.error is None for execution in done.values())
    assert "next in" not in new_worker.log() and "next in" not in old_worker.log()
    assert os.environ.get(deploys.STAGE_VARIABLE) is None  # the test process itself was not restarted
