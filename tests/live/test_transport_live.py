"""The embedded broker under a real worker: killed pool children, remote control.

A worker on kombu's synchronous filesystem transport ran Celery's blocking loop, whose pool
shares one in-queue pipe and one lock among its children; a child killed while it waited for
work (holding the lock) left its replacement blocked on that lock for good, and the worker
consumed nothing more (billiard#104, celery#2011). These tests run the embedded default's
transport under a real worker and kill its children.
"""

from __future__ import annotations

import os
import re
import signal
from pathlib import Path

import psutil
import pytest
from django.conf import settings

import durableflow
from durableflow.models import Execution
from tests.helpers import uid, wait_for, wait_status
from tests.testapp.models import Marker

pytestmark = [
    pytest.mark.skipif(
        getattr(settings, "CELERY_BROKER_TRANSPORT", None) != "durableflow.transport:FilesystemTransport",
        reason="the embedded default's broker (durableflow.transport) only",
    ),
]

ROUNDS = 10  # two kills a round: an idle child, then one running a delivery


def _inspect(worker, command: str) -> dict:
    from project.celery import app

    hostname = re.search(r"(\S+@\S+) ready\.", worker.log()).group(1)
    replies = getattr(app.control.inspect(destination=[hostname], timeout=10), command)() or {}
    assert hostname in replies, f"{hostname} did not answer {command}: {replies}"
    return replies[hostname]


def _queued(queue: str) -> list[str]:
    """The queue's message files, in the queue folder and claimed but not yet deleted."""
    options = settings.CELERY_BROKER_TRANSPORT_OPTIONS
    folders = {options["data_folder_in"], options["processed_folder"]}
    return [name for folder in folders for name in os.listdir(folder) if f".{queue}.msg" in name]


def _replaced(worker, victim: int) -> list[int] | None:
    children = worker.children()
    return children if len(children) == 2 and victim not in children else None


def _kill(worker, victim: int) -> None:
    os.kill(victim, signal.SIGKILL)
    wait_for(lambda: _replaced(worker, victim), timeout=60, what=f"pool child {victim} to be replaced")


def test_the_worker_keeps_consuming_after_twenty_pool_children_are_killed(workers, live_db):
    """Kill an idle child and one blocked in a step body, ten times each; everything completes.

    Each child must have its own in-queue, which is the event loop's pool (``AsynPool``):
    ``celery inspect stats`` reports one in-queue per child there, and no write statistics at
    all for the blocking pool whose shared in-queue lock a killed idle child takes with it.
    """
    queue, tag = uid("q"), uid("kill")
    worker = workers(queue, concurrency=2)
    wait_for(lambda: len(worker.children()) == 2, what="the two pool children to start")
    pool = _inspect(worker, "stats")["pool"]
    assert pool["writes"] != "N/A", "the worker runs the blocking pool: a killed child can wedge it"
    assert pool["writes"]["inqueues"]["total"] == 2

    blocked, pings = [], []
    for round in range(ROUNDS):
        name = f"{tag}-{round}"
        # The step body blocks until it is killed; its second attempt returns at once.
        blocked.append(durableflow.start("t.crash", {"tag": name, "hold": 3600}, queue=queue).id)
        wait_for(lambda: Marker.count(f"{name}:slow") == 1, what=f"round {round}'s step body to start")
        busy = Marker.objects.get(name=f"{name}:slow").pid
        idle = [pid for pid in worker.children() if pid != busy]
        assert len(idle) == 1
        _kill(worker, idle[0])  # a child waiting for work: the one the shared lock wedged
        _kill(worker, busy)
        pings.append(durableflow.start("t.ping", queue=queue).id)
        wait_status(pings[-1], timeout=60)  # the worker still consumes, after every pair of kills

    later = [durableflow.start("t.ping", queue=queue).id for _ in range(20)]
    for execution_id in blocked + later:
        wait_status(execution_id, timeout=120)
    assert Execution.objects.filter(pk__in=blocked + pings + later).exclude(status="completed").count() == 0
    assert [Marker.count(f"{tag}-{round}:after") for round in range(ROUNDS)] == [1] * ROUNDS
    wait_for(lambda: not _queued(queue), timeout=30, what="the queue folder to hold none of the queue's messages")

    group = worker.pid
    workers.stop_all()
    wait_for(lambda: not _running_in_group(group), timeout=30, what="the worker's processes to be gone")


def _running_in_group(group: int) -> list[int]:
    running = []
    for process in psutil.process_iter(["status"]):
        try:
            if process.info["status"] != psutil.STATUS_ZOMBIE and os.getpgid(process.pid) == group:
                running.append(process.pid)
        except ProcessLookupError:
            continue
    return running


def test_celery_inspect_ping_reaches_a_worker_through_the_control_folder(workers, live_db):
    worker = workers(uid("q"))
    assert _inspect(worker, "ping") == {"ok": "pong"}
    control = Path(settings.CELERY_BROKER_TRANSPORT_OPTIONS["control_folder"])
    assert (control / "celery.pidbox.exchange").exists()
