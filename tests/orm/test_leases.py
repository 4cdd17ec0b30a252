"""The heartbeat's lifecycle: asleep with nothing to renew, awake on hold, stopped at once."""

from __future__ import annotations

import threading
import time
from datetime import timedelta

import pytest
from django.db import connections
from django.db.backends.signals import connection_created
from django.utils import timezone

from durableflow.models import Execution
from durableflow.orm.leases import LeaseKeeper
from tests.helpers import uid, wait_for

TICK = 0.01  # short, so that a keeper that polled while idle would show it within a second
SHORT = 0.3  # a lease due for renewal every 0.1 s
LONG = 600.0  # a lease that is not due during a test


class CountingKeeper(LeaseKeeper):
    """Renews without a database and counts the renewals; ``gate`` can hold one in flight."""

    tick = TICK

    def __init__(self) -> None:
        super().__init__()
        self.renewals: list[str] = []
        self.gate = threading.Event()
        self.gate.set()
        self.in_renewal = threading.Event()

    def renew(self, lease) -> bool:
        self.in_renewal.set()
        self.gate.wait(30)
        self.renewals.append(lease.execution_id)
        lease.renewed = time.monotonic()
        return True


@pytest.fixture
def counting():
    keeper = CountingKeeper()
    yield keeper
    keeper.gate.set()
    for lease in keeper.held():
        keeper.release(lease)
    assert keeper.stop(timeout=10)


def test_a_keeper_that_never_held_a_lease_runs_no_thread(counting):
    assert counting.idle and counting.passes == 0
    assert counting._thread is None


def test_an_idle_keeper_sleeps_until_the_next_hold(counting):
    lease = counting.hold(uid("idle"), "token", SHORT)
    wait_for(lambda: len(counting.renewals) >= 3, timeout=30, what="three renewals of a short lease")
    counting.release(lease)
    wait_for(lambda: counting.idle, timeout=30, what="the keeper to go idle")
    passes, renewals = counting.passes, len(counting.renewals)

    time.sleep(100 * TICK)  # a keeper that polled while idle would have looked ~100 times

    assert (counting.passes, len(counting.renewals)) == (passes, renewals)
    assert counting._thread.is_alive()


def test_hold_wakes_an_idle_keeper(counting):
    counting.release(counting.hold(uid("first"), "token", SHORT))
    wait_for(lambda: counting.idle, timeout=30, what="the keeper to go idle")
    thread = counting._thread

    execution_id = uid("woken")
    counting.hold(execution_id, "token", SHORT)

    # Asleep without a timeout, the thread renews only because hold() woke it.
    wait_for(lambda: execution_id in counting.renewals, timeout=30, what="the renewal of the new lease")
    assert counting._thread is thread


def test_a_shorter_lease_wakes_a_keeper_asleep_until_a_longer_ones_due_time(counting):
    long = counting.hold(uid("long"), "token", LONG)
    wait_for(lambda: counting.passes >= 1, timeout=30, what="the first pass")

    short_id = uid("short")
    short = counting.hold(short_id, "token", SHORT)

    wait_for(lambda: short_id in counting.renewals, timeout=30, what="the short lease's renewal")
    assert long.execution_id not in counting.renewals  # renewed only once a third of it passed
    assert short in counting.held()


def test_only_leases_older_than_a_third_of_their_length_are_renewed(counting):
    lease = counting.hold(uid("third"), "token", 3.0)
    held_at = lease.renewed

    wait_for(lambda: counting.renewals, timeout=30, what="the first renewal")

    assert lease.renewed - held_at >= 1.0


def test_stop_ends_an_idle_keeper_at_once(counting):
    counting.release(counting.hold(uid("stop"), "token", SHORT))
    wait_for(lambda: counting.idle, timeout=30, what="the keeper to go idle")
    thread = counting._thread

    started = time.monotonic()
    stopped = counting.stop(timeout=10)

    assert stopped and not thread.is_alive()
    assert time.monotonic() - started < 5  # woken by its event, not by a timeout
    assert thread not in threading.enumerate()


def test_stop_returns_within_its_timeout_while_a_renewal_is_in_flight(counting):
    counting.gate.clear()  # the renewal hangs like an UPDATE waiting on a lock
    first, second = uid("stuck"), uid("skipped")
    leases = [counting.hold(first, "token", SHORT), counting.hold(second, "token", SHORT)]
    wait_for(counting.in_renewal.is_set, timeout=30, what="a renewal to start")
    thread = counting._thread

    started = time.monotonic()
    stopped = counting.stop(timeout=0.2)

    assert not stopped and time.monotonic() - started < 5
    counting.gate.set()
    wait_for(lambda: not thread.is_alive(), timeout=30, what="the thread to end after its renewal")
    assert len(counting.renewals) == 1  # the one in flight finished; no other was started
    assert set(counting.held()) == set(leases)  # stop() keeps the leases it held


def test_hold_after_stop_starts_a_new_thread(counting):
    counting.hold(uid("before"), "token", LONG)
    old = counting._thread
    counting.stop(timeout=10)

    execution_id = uid("after")
    counting.hold(execution_id, "token", SHORT)

    wait_for(lambda: execution_id in counting.renewals, timeout=30, what="a renewal by the new thread")
    assert counting._thread is not old and not old.is_alive()


# On the database --------------------------------------------------------------------------


@pytest.fixture
def keeper(live_db):
    keeper = LeaseKeeper()
    keeper.tick = 0.05
    yield keeper
    for lease in keeper.held():
        keeper.release(lease)
    assert keeper.stop(timeout=10)


def _leased_execution(token: str, alias: str = "default") -> Execution:
    execution_id = uid("lease")
    return Execution.objects.using(alias).create(
        id=execution_id,
        workflow="t.steps",
        queue="leases",
        root_id=execution_id,
        status="running",
        lease_token=token,
        lease_expires_at=timezone.now() + timedelta(seconds=2),
    )


def _expires_at(execution_id: str):
    return Execution.objects.values_list("lease_expires_at", flat=True).get(pk=execution_id)


@pytest.fixture
def heartbeat_connections():
    """The database wrappers the heartbeat thread connects with, by alias."""
    opened: list = []

    def record(sender, connection, **kwargs):
        if threading.current_thread().name == "durableflow-heartbeat":
            opened.append(connection)

    connection_created.connect(record)
    yield opened
    connection_created.disconnect(record)


def _all_closed(wrappers) -> bool:
    # Checked after the keeper went idle: it closes its connections just before it sleeps.
    return all(wrapper.connection is None for wrapper in wrappers)


def test_a_renewal_extends_the_lease_and_then_the_idle_keeper_closes_its_connection(keeper, heartbeat_connections):
    execution = _leased_execution("mine")
    first_expiry = execution.lease_expires_at

    lease = keeper.hold(execution.id, "mine", 1.2)
    wait_for(lambda: _expires_at(execution.id) > first_expiry, timeout=30, what="the lease to be renewed")
    keeper.release(lease)

    wait_for(lambda: keeper.idle and _all_closed(heartbeat_connections), timeout=30, what="the keeper to disconnect")
    assert not lease.lost
    assert {wrapper.alias for wrapper in heartbeat_connections} == {"default"}


def test_a_renewal_that_matches_no_row_marks_the_lease_lost(keeper):
    execution = _leased_execution("mine")
    lease = keeper.hold(execution.id, "mine", 0.6)
    wait_for(lambda: _expires_at(execution.id) > execution.lease_expires_at, timeout=30, what="a first renewal")

    Execution.objects.filter(pk=execution.id).update(lease_token="theirs")  # another delivery took it

    wait_for(lambda: lease.lost, timeout=30, what="the lease to be marked lost")
    assert Execution.objects.get(pk=execution.id).lease_token == "theirs"


@pytest.fixture
def second_alias(live_db):
    """A second alias on the same database, as a project routing durableflow's tables would have."""
    alias = "durableflow_leases"
    connections.settings[alias] = {**connections.settings["default"]}
    yield alias
    connections[alias].close()
    del connections[alias]
    del connections.settings[alias]


def test_a_lease_is_renewed_through_its_own_database_alias(keeper, second_alias, heartbeat_connections):
    execution = _leased_execution("mine", alias=second_alias)

    lease = keeper.hold(execution.id, "mine", 1.2, alias=second_alias)
    wait_for(lambda: _expires_at(execution.id) > execution.lease_expires_at, timeout=30, what="the renewal")
    keeper.release(lease)

    wait_for(lambda: keeper.idle and _all_closed(heartbeat_connections), timeout=30, what="the keeper to disconnect")
    assert lease.alias == second_alias and not lease.lost
    assert {wrapper.alias for wrapper in heartbeat_connections} == {second_alias}
