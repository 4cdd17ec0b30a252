"""The faults, one scenario each: start executions of ``chaos.flow``, inject, stop, say when.

A scenario returns an ``Outcome``: the executions it started, what each may end as, the
faults it injected, and ``calm_at``, the moment the last fault stopped (the drain bound ``R``
is counted from there). Randomness comes from ``rng`` only (seeded per scenario and seed).
"""

from __future__ import annotations

import os
import random
import signal
import threading
import time
from datetime import timedelta
from typing import Callable

from django.utils import timezone

from tests.chaos.driver import LEASE, Chaos, Outcome, Size

HOLD = 0.4  # seconds each step body takes: long enough for a kill to land inside one
STORM = 20.0  # seconds of connection terminations
CANCELLED = (("cancelled", "compensated"), ("CANCELLED",))


def _until(seconds: float, began: float) -> None:
    time.sleep(max(0.0, began + seconds - time.monotonic()))


def _flow(chaos: Chaos, outcome: Outcome, tag: str, n: int, wave: int = 0, **params) -> list[str]:
    ids = chaos.start(f"{tag}-w{wave}", n, store=tag, hold=params.pop("hold", HOLD), **params)
    outcome.add(ids)
    return ids


def _kill_a_running_body(chaos: Chaos, outcome: Outcome) -> None:
    """SIGKILL a pool process whose step body is running, if one is."""
    pid = chaos.running_body_pid()
    if pid is not None:
        try:
            os.kill(pid, signal.SIGKILL)
            outcome.count("pool children killed mid-step")
        except ProcessLookupError:
            pass


def terminate_connections(chaos: Chaos, rng: random.Random, size: Size, tag: str) -> Outcome:
    """Every client backend of the database terminated every 0.5-1.5 s for ``STORM`` s, runs started
    in two waves meanwhile (the test process's own starts meet it too, and retry)."""
    outcome, stopped = Outcome(store=tag), threading.Event()

    def terminator() -> None:
        while not stopped.wait(rng.uniform(0.5, 1.5)):
            rows = chaos.sql(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = current_database() "
                "AND pid <> pg_backend_pid() AND backend_type = 'client backend'"
            )
            outcome.count("termination rounds")
            outcome.count("backends terminated", sum(1 for (done,) in rows if done))

    began = time.monotonic()
    thread = threading.Thread(target=terminator, name="terminator", daemon=True)
    thread.start()
    try:
        # Each run naps until just after the storm: only the sweep can wake them, once every
        # pool process had its connections terminated (the path that once stopped for good).
        until = (timezone.now() + timedelta(seconds=STORM)).isoformat()
        _flow(chaos, outcome, tag, size.runs // 2, wave=0, until=until)
        _until(8, began)
        _flow(chaos, outcome, tag, size.runs - size.runs // 2, wave=1, until=until)
        _until(STORM, began)
    finally:
        stopped.set()
        thread.join(timeout=30)
    outcome.calm_at = time.monotonic()
    return outcome


def kill_pool_child(chaos: Chaos, rng: random.Random, size: Size, tag: str) -> Outcome:
    """A pool process SIGKILLed while a step body runs, again and again; a third of the runs
    also kill their own process once right after a step's commit (before the next step), a
    third once in the effect's perform (after the charge: the next delivery must look it up)."""
    outcome, third = Outcome(store=tag), size.runs // 3
    _flow(chaos, outcome, tag, size.runs - 2 * third)
    _flow(chaos, outcome, tag, third, wave=1, die_after_commit=True)
    _flow(chaos, outcome, tag, third, wave=2, die_in_perform=True)
    for fault, where in (("killed after a commit (by the run itself)", "after-s0"),
                         ("killed in the effect's perform (by the run itself)", "in-perform")):  # fmt: skip
        outcome.tallies[fault] = (
            "SELECT count(*) FROM testapp_chaosledger WHERE kind = 'die' AND step = %s AND "
            + chaos.sql.among("execution_id"),
            [where, outcome.ids],
        )
    began, kills = time.monotonic(), max(3, size.runs // 2)
    while outcome.faults.get("pool children killed mid-step", 0) < kills and time.monotonic() - began < 30:
        time.sleep(rng.uniform(0.5, 1.5))
        _kill_a_running_body(chaos, outcome)
    outcome.calm_at = time.monotonic()
    return outcome


def kill_worker_tree(chaos: Chaos, rng: random.Random, size: Size, tag: str) -> Outcome:
    """Each worker's whole process tree SIGKILLed in turn while runs are under way, and started again."""
    outcome = Outcome(store=tag)
    ids = _flow(chaos, outcome, tag, size.runs)
    for _ in range(2):
        time.sleep(rng.uniform(1.5, 3.0))
        victim = chaos.workers[0]
        held = chaos.held_by(ids, victim.children())
        victim.kill(signal.SIGKILL)
        outcome.count("worker trees killed")
        outcome.count("runs held by a killed tree", held)
        chaos.restart_worker(victim)
    outcome.calm_at = time.monotonic()
    return outcome


def stop_past_the_lease(chaos: Chaos, rng: random.Random, size: Size, tag: str) -> Outcome:
    """One worker's whole tree SIGSTOPped for the lease and 4 s more, then SIGCONTed: its
    deliveries' leases expire, the other worker takes them over, the zombie wakes up."""
    outcome = Outcome(store=tag)
    ids = _flow(chaos, outcome, tag, size.runs)
    time.sleep(rng.uniform(1.5, 2.5))
    zombie = chaos.workers[0]
    zombie.kill(signal.SIGSTOP)
    outcome.count("workers stopped")
    outcome.count("runs held by the stopped worker", chaos.held_by(ids, zombie.children()))
    try:
        time.sleep(LEASE + 4)
    finally:
        zombie.kill(signal.SIGCONT)
    outcome.calm_at = time.monotonic()
    return outcome


def duplicate_deliveries(chaos: Chaos, rng: random.Random, size: Size, tag: str) -> Outcome:
    """20 extra deliveries of every execution still unfinished, sent while they run."""
    from durableflow import tasks

    outcome = Outcome(store=tag)
    ids = _flow(chaos, outcome, tag, size.runs, nap=1)
    time.sleep(rng.uniform(0.5, 1.5))
    unfinished = [i for i, status in chaos.statuses(ids).items() if status in ("pending", "running", "waiting")]
    for _ in range(20):
        for execution_id in unfinished:
            tasks.deliver.apply_async(args=[execution_id])
            outcome.count("duplicate deliveries")
    outcome.calm_at = time.monotonic()
    return outcome


def _under_way(chaos: Chaos, rng: random.Random, size: Size, tag: str) -> Outcome:
    """Runs started and given a second or two to get going: a service fault meets them mid-way."""
    outcome = Outcome(store=tag)
    _flow(chaos, outcome, tag, size.runs, nap=1)
    time.sleep(rng.uniform(1.0, 2.0))
    return outcome


def broker_restarted_empty(chaos: Chaos, rng: random.Random, size: Size, tag: str) -> Outcome:
    """The broker SIGKILLed under running executions and started again empty 3 s later (every
    message gone: Redis keeps none, RabbitMQ starts on a fresh data folder)."""
    outcome = _under_way(chaos, rng, size, tag)
    chaos.broker.kill()
    outcome.count(f"{chaos.backend.name} killed")
    time.sleep(3)
    chaos.broker.start(empty=True)
    outcome.calm_at = time.monotonic()
    return outcome


def broker_restarted(chaos: Chaos, rng: random.Random, size: Size, tag: str) -> Outcome:
    """The broker SIGKILLed and started again 3 s later on its data: the durable queues come back
    with their messages, the deliveries that were unacknowledged among them."""
    outcome = _under_way(chaos, rng, size, tag)
    chaos.broker.kill()
    outcome.count(f"{chaos.backend.name} killed")
    time.sleep(3)
    chaos.broker.start(empty=False)
    outcome.calm_at = time.monotonic()
    return outcome


def postgres_restarted(chaos: Chaos, rng: random.Random, size: Size, tag: str) -> Outcome:
    """PostgreSQL restarted ``-m immediate`` (a crash: every backend gone, WAL recovery)."""
    outcome = _under_way(chaos, rng, size, tag)
    chaos.postgres.restart_immediate()
    outcome.count("postgres restarts")
    outcome.calm_at = time.monotonic()
    return outcome


def beat_stopped_then_doubled(chaos: Chaos, rng: random.Random, size: Size, tag: str) -> Outcome:
    """No beat for 8 s (naps are not woken), then two beats at once (every sweep sent twice)."""
    outcome = Outcome(store=tag)
    chaos.ensure(beats=0)
    outcome.count("beats stopped")
    _flow(chaos, outcome, tag, size.runs, nap=2)
    time.sleep(8)
    chaos.ensure(beats=2)
    outcome.count("beats started", 2)
    outcome.calm_at = time.monotonic()
    return outcome


def poison_step(chaos: Chaos, rng: random.Random, size: Size, tag: str) -> Outcome:
    """A step that SIGKILLs its process whenever it runs, among ordinary runs: it is failed
    with DELIVERY_LOST after MAX_LOST_DELIVERIES, the others complete."""
    outcome = Outcome(store=tag)
    poisoned = chaos.start(f"{tag}-poison", 1, workflow="chaos.poison")
    outcome.add(poisoned, ("failed",), ("DELIVERY_LOST",))
    outcome.tallies["deliveries killed by the poison step"] = (
        "SELECT count(*) FROM testapp_chaosledger WHERE execution_id = %s AND step = 'poison' AND kind = 'body'",
        poisoned,
    )
    _flow(chaos, outcome, tag, size.runs)
    outcome.calm_at = time.monotonic()  # the fault is the run itself: counted from its start
    return outcome


def cancel_storm(chaos: Chaos, rng: random.Random, size: Size, tag: str) -> Outcome:
    """Every run cancelled at a random moment (mid-step or waiting) while pool processes are
    SIGKILLed: each cancelled run compensates its recorded compensable step once."""
    import durableflow
    from durableflow.exceptions import InvalidTransition

    outcome = Outcome(store=tag)
    ids = chaos.start(f"{tag}-w0", size.runs, store=tag, hold=HOLD, wait=True)
    outcome.add(ids, *CANCELLED)
    order = list(ids)
    rng.shuffle(order)
    began = time.monotonic()
    for number, execution_id in enumerate(order):
        _until(number * 8.0 / len(order), began)
        try:
            durableflow.cancel(execution_id, "chaos")
            outcome.count("cancels")
        except InvalidTransition:
            pass
        _kill_a_running_body(chaos, outcome)
    outcome.calm_at = time.monotonic()
    return outcome


Scenario = Callable[[Chaos, random.Random, Size, str], Outcome]
# In the order they run: the ones that restart a service come last. Each applies to every stack
# but those in NEEDS (what the stack must offer, tests/chaos/backends.py).
SCENARIOS: dict[str, Scenario] = {
    "duplicate-deliveries": duplicate_deliveries,
    "kill-pool-child": kill_pool_child,
    "kill-worker-tree": kill_worker_tree,
    "sigstop-past-lease": stop_past_the_lease,
    "poison-step": poison_step,
    "cancel-storm": cancel_storm,
    "terminate-connections": terminate_connections,
    "beat-stopped-then-doubled": beat_stopped_then_doubled,
    "broker-restarted-empty": broker_restarted_empty,
    "broker-restarted": broker_restarted,
    "postgres-restarted": postgres_restarted,
}
NEEDS = {
    "terminate-connections": "postgresql",
    "broker-restarted-empty": "broker server",
    "broker-restarted": "durable broker",
    "postgres-restarted": "postgresql",
}
