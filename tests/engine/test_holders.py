"""Lease holders: a lease held by a process gone from this machine is taken over at once.

The contract part runs on both storages with engines that stand for processes of the test's
making (``Holders(me, probe)``: who the engine is, and which processes are alive on its
machine). A "crashed" delivery is a journal that claimed and was never finished. Real worker
processes SIGKILLed mid-step: ``test_kill_recovery_live.py``.
"""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
import time

import pytest
from django.db import OperationalError

from durableflow.engine import faults, holders
from durableflow.engine.holders import Holder, Holders
from durableflow.engine.verbs import Engine
from durableflow.registry import registry
from tests.engine.test_faults import fail_once
from tests.harness import LEASE_SECONDS, SETTINGS

HOST = "worker-1/3f0c-boot/4026531836"
CHILD = Holder(HOST, 100, "5000")  # the pool process that "crashes"
SIBLING = Holder(HOST, 200, "6000")  # another pool process on the same machine


def engine_of(backend, me: Holder | None, alive: dict[int, str] | None = None) -> Engine:
    """The verbs as process ``me`` runs them, seeing the processes ``alive`` (pid: start time)."""
    alive = dict(alive or {})
    if me is not None:
        alive.setdefault(me.pid, me.started)
    settings = dataclasses.replace(SETTINGS, holders=Holders(me, alive.get))
    return Engine(backend.storage, registry, settings)


@pytest.fixture
def crashed(backend):
    """``crashed(engine, execution_id)``: claim it as ``engine`` and never finish (closed at the end)."""
    journals = []

    def crash(engine: Engine, execution_id: str):
        journal = engine.journal(execution_id)
        assert journal.claim() is not None
        journals.append(journal)
        return journal

    yield crash
    for journal in journals:
        journal.close()


def test_a_claim_records_its_holder(backend, crashed):
    execution_id = backend.start("t.steps")
    crashed(engine_of(backend, CHILD), execution_id)

    assert backend.get(execution_id).lease_holder == CHILD.text == f"{HOST} 100 5000"


def test_a_lease_held_by_a_dead_process_on_this_machine_is_taken_over_at_once(backend, crashed):
    execution_id = backend.start("t.steps")
    child = crashed(engine_of(backend, CHILD), execution_id)

    sibling = engine_of(backend, SIBLING)  # it sees no process 100: the child was killed
    assert sibling.deliver(execution_id) == "completed"  # no clock moved: the lease was still live

    done = backend.get(execution_id)
    assert (done.deliveries, done.result) == (2, {"a": 1, "b": 2, "c": {"sum": 3}})
    assert not backend.storage.holds_lease(execution_id, child.token)


def test_a_lease_held_by_a_live_process_on_this_machine_is_waited_out(backend, crashed):
    execution_id = backend.start("t.steps")
    crashed(engine_of(backend, CHILD), execution_id)
    sibling = engine_of(backend, SIBLING, alive={CHILD.pid: CHILD.started})

    assert sibling.deliver(execution_id) == "skipped"
    backend.advance(LEASE_SECONDS + 1)
    assert sibling.deliver(execution_id) == "completed"


def test_a_process_id_used_again_by_another_process_is_not_the_holder(backend, crashed):
    execution_id = backend.start("t.steps")
    crashed(engine_of(backend, CHILD), execution_id)
    sibling = engine_of(backend, SIBLING, alive={CHILD.pid: "9999"})  # pid 100, started later

    assert sibling.deliver(execution_id) == "completed"


@pytest.mark.parametrize(
    "holder",
    [
        Holder("worker-2/3f0c-boot/4026531836", 100, "5000"),  # another machine
        Holder("worker-1/77aa-boot/4026531836", 100, "5000"),  # this name, another boot
        Holder("worker-1/3f0c-boot/4026532201", 100, "5000"),  # another process namespace (a container)
    ],
    ids=["other-host", "other-boot", "other-namespace"],
)
def test_a_lease_held_elsewhere_is_waited_out(backend, crashed, holder):
    execution_id = backend.start("t.steps")
    crashed(engine_of(backend, holder), execution_id)
    sibling = engine_of(backend, SIBLING)  # sees no process 100 here: says nothing of elsewhere

    assert sibling.deliver(execution_id) == "skipped"
    backend.advance(LEASE_SECONDS + 1)
    assert sibling.deliver(execution_id) == "completed"


def test_a_holder_that_recorded_nothing_is_waited_out(backend, crashed):
    execution_id = backend.start("t.steps")
    crashed(engine_of(backend, None), execution_id)  # not Linux: no holder recorded

    assert engine_of(backend, SIBLING).deliver(execution_id) == "skipped"


def test_this_process_takes_over_a_lease_none_of_its_deliveries_holds(backend, crashed):
    execution_id = backend.start("t.steps")
    child = engine_of(backend, CHILD)
    running = crashed(child, execution_id)

    assert child.deliver(execution_id) == "skipped"  # a delivery of this process still holds it
    running.close()
    assert child.deliver(execution_id) == "completed"


def test_a_fault_whose_lease_could_not_be_given_back_is_taken_over_by_the_same_process(backend):
    """The database failed under a delivery, and again when it gave its lease back: the
    delivery sent again to the same process claims it at once (to another one on this machine,
    it waits out the lease: that process is alive)."""
    execution_id = backend.start("t.steps")
    child = engine_of(backend, CHILD)
    fail_once(backend.storage, "record_outcome")
    fail_once(backend.storage, "update_execution")  # the give-back

    assert child.deliver(execution_id) == faults.FAULT
    assert backend.get(execution_id).lease_token is not None  # still held

    assert engine_of(backend, SIBLING, alive={CHILD.pid: CHILD.started}).deliver(execution_id) == "skipped"
    assert child.deliver(execution_id) == "completed"


def test_the_sweep_gives_back_the_leases_of_processes_gone_from_its_machine(backend, crashed):
    gone, elsewhere = backend.start("t.steps"), backend.start("t.steps")
    crashed(engine_of(backend, CHILD), gone)
    crashed(engine_of(backend, Holder("worker-2/3f0c-boot/4026531836", 100, "5000")), elsewhere)

    counts = engine_of(backend, SIBLING).sweep()

    assert counts["taken_over"] == 1
    # Its lease is over (its token kept: the next claim counts the delivery that died as lost).
    assert backend.get(gone).status == "running" and backend.get(gone).lease_expires_at < backend.now()
    assert backend.get(elsewhere).lease_token is not None
    assert backend.deliver(gone) == "completed"  # any process, on any machine, claims it now


def test_the_sweep_leaves_a_live_holder_alone(backend, crashed):
    execution_id = backend.start("t.steps")
    crashed(engine_of(backend, CHILD), execution_id)

    assert engine_of(backend, SIBLING, alive={CHILD.pid: CHILD.started}).sweep()["taken_over"] == 0
    assert backend.get(execution_id).lease_token is not None


# This machine's processes ----------------------------------------------------------------------


@pytest.fixture
def linux():
    if holders.this_process() is None:
        pytest.skip("only Linux tells a process's start time (/proc)")


def test_this_process_is_a_holder_with_its_own_start_time(linux):
    me = holders.this_process()

    assert me.pid == os.getpid()
    assert holders.probe(os.getpid()) == me.started
    assert Holder.parse(me.text) == me
    assert holders.local().gone(me.text, "a token no delivery of this process holds")
    holders.hold("held")
    try:
        assert not holders.local().gone(me.text, "held")
    finally:
        holders.release("held")


def test_a_process_that_ended_or_is_a_zombie_is_not_alive(linux):
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    deadline = time.monotonic() + 30
    while holders.probe(child.pid) is not None:  # exited, not yet reaped: a zombie
        assert time.monotonic() < deadline, "the child never exited"
        time.sleep(0.01)
    child.wait()
    assert holders.probe(child.pid) is None  # reaped


def test_a_forked_child_is_another_holder(linux):
    parent = holders.this_process()
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: its own identity, and none of the parent's running deliveries
        os.close(read)
        me = holders.this_process()
        os.write(write, f"{me.pid} {me.started} {me.host == parent.host}".encode())
        os._exit(0)
    os.close(write)
    try:
        answer = os.read(read, 200).decode().split()
    finally:
        os.close(read)
        os.waitpid(pid, 0)
    assert answer[0] == str(pid) and answer[2] == "True"
    assert holders.local().gone(Holder(parent.host, pid, answer[1]).text, "any")  # it ended


@pytest.mark.parametrize("text", [None, "", "no-spaces", "host notapid 12", "host 12"])
def test_a_holder_that_cannot_be_read_is_waited_out(text):
    assert Holder.parse(text) is None
    assert not Holders(Holder(HOST, 1, "1"), lambda pid: None).gone(text, "token")


def test_a_database_failure_while_judging_a_holder_is_a_fault(backend, crashed):
    execution_id = backend.start("t.steps")
    crashed(engine_of(backend, CHILD), execution_id)
    fail_once(backend.storage, "get_execution", OperationalError("the connection is lost"), times=2)

    assert engine_of(backend, SIBLING).deliver(execution_id) == faults.FAULT
