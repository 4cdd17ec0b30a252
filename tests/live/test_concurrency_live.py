"""Concurrency keys on real worker and beat processes: runs of one customer started together
never overlap, another customer's run is not held up behind them, and a holder SIGKILLed
mid-step keeps its slot until it is resumed, so that no two runs ever hold it.

Overlap is read off the ``Marker`` rows the bodies write as they start and end their work,
numbered in the order they were written (no clock is compared)."""

from __future__ import annotations

import durableflow
from durableflow.models import Execution
from tests.helpers import uid, wait_for, wait_status
from tests.testapp.models import Marker


def _marks(tag: str, customer: str) -> list[str]:
    prefix = f"{tag}:{customer}:"
    names = Marker.objects.filter(name__startswith=prefix).order_by("id").values_list("name", flat=True)
    return [name[len(prefix) :] for name in names]


def _assert_one_at_a_time(marks: list[str], runs: int) -> None:
    """Every start is followed by its own end before the next start (a re-run body may repeat its mark)."""
    order, current = [], None
    for mark in marks:
        what, n = mark.split(":")
        if what == "start":
            assert current in (None, n), f"run {n} started while run {current} held the slot: {marks}"
            if current is None:
                order.append(n)
            current = n
        else:
            assert current == n, f"run {n} ended outside its slot: {marks}"
            current = None
    assert len(order) == runs and current is None, marks


def test_runs_of_one_customer_never_overlap_and_another_customer_is_not_held_up(workers, live_db):
    queue, tag = uid("q"), uid("limit")
    workers(queue, concurrency=2)
    runs = [
        durableflow.start("t.per-customer", {"tag": tag, "customer": "A", "n": n}, queue=queue) for n in range(5)
    ]
    other = durableflow.start("t.per-customer", {"tag": tag, "customer": "B", "n": 9}, queue=queue)
    assert [Execution.objects.get(pk=run.id).concurrency_ticket is None for run in runs] == [True] + [False] * 4
    queued = Execution.objects.get(pk=runs[4].id)
    assert queued.waiting_for == {"kind": "concurrency", "key": "A", "position": 4}

    for run in (*runs, other):
        wait_status(run.id, timeout=120)

    _assert_one_at_a_time(_marks(tag, "A"), 5)
    # They started in start order, and B ran beside A's first run, not after all five.
    assert [m.split(":")[1] for m in _marks(tag, "A") if m.startswith("start")] == ["0", "1", "2", "3", "4"]
    b_end = Marker.objects.get(name=f"{tag}:B:end:9").id
    a_ends = list(Marker.objects.filter(name__startswith=f"{tag}:A:end:").order_by("id").values_list("id", flat=True))
    assert b_end < a_ends[1], "the other customer's run waited behind this customer's"


def test_a_sigkilled_holder_keeps_its_slot_until_it_is_resumed(workers, live_db):
    queue, tag = uid("q"), uid("limit-kill")
    workers(queue, concurrency=2)
    holder = durableflow.start("t.per-customer", {"tag": tag, "customer": "A", "n": 0, "kill": True}, queue=queue)
    wait_for(lambda: Marker.count(f"{tag}:killed") == 1, what="the holder's worker process to be killed", timeout=60)
    behind = [
        durableflow.start("t.per-customer", {"tag": tag, "customer": "A", "n": n}, queue=queue) for n in (1, 2)
    ]

    for run in (holder, *behind):
        wait_status(run.id, timeout=120)

    _assert_one_at_a_time(_marks(tag, "A"), 3)
    assert [m for m in _marks(tag, "A") if m.startswith("start")][0] == "start:0"
    resumed = Execution.objects.get(pk=holder.id)
    assert resumed.deliveries >= 2  # its first delivery died holding the lease
