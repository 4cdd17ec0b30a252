"""Versions side by side, held against both storages: several versions of one workflow name are
registered at once; a start runs the newest (or the one marked ``default=True``); an execution
runs the version it started with; one whose version is no longer registered stalls, losing
nothing, with a message that says so, and resumes once it is registered again.

A deploy is shown as a change of what the registry holds: ``registry.override`` leaves one
version of a name for a block (the code before version 2 was added beside it).
"""

from __future__ import annotations

import pytest

import durableflow
from durableflow.registry import registry
from tests.contract.calls import call, calls

pytestmark = pytest.mark.usefixtures("call_log")


@durableflow.workflow("contract.versions", version="1")
def order_v1(ctx, params):
    ctx.step.run("reserve", call, "reserve-1")
    ctx.step.sleep("nap", 10)
    return {"version": 1, "shipped": ctx.step.run("ship", call, "ship-1")}


@durableflow.workflow("contract.versions", version="2")
def order_v2(ctx, params):
    ctx.step.sleep("nap", 10)  # the nap moved first: no journal of version 1 replays on this
    ctx.step.run("reserve", call, "reserve-2")
    return {"version": 2, "shipped": ctx.step.run("ship", call, "ship-2")}


def only(fn):
    """The registry as it was when ``fn``'s version was the only one."""
    return registry.override(fn.__durableflow__)


def test_a_start_runs_the_newest_version(backend):
    execution_id = backend.start("contract.versions")
    assert backend.get(execution_id).version == "2"
    assert backend.run(execution_id).result == {"version": 2, "shipped": "ship-2"}


def test_runs_started_before_a_new_version_finish_on_theirs(backend):
    with only(order_v1):
        before = backend.start("contract.versions")
        backend.deliver(before)  # reserved, napping

    after = backend.start("contract.versions")  # version 2 is deployed beside version 1
    assert (backend.run(before).result, backend.run(after).result) == (
        {"version": 1, "shipped": "ship-1"},
        {"version": 2, "shipped": "ship-2"},
    )
    assert calls == ["reserve-1", "ship-1", "reserve-2", "ship-2"]
    assert [backend.get(i).version for i in (before, after)] == ["1", "2"]


def test_a_run_whose_version_is_gone_stalls_says_so_and_resumes_when_it_is_back(backend):
    with only(order_v1):
        execution_id = backend.start("contract.versions")
        backend.deliver(execution_id)
    before = backend.records(execution_id)

    with only(order_v2):  # version 1 deleted from the code
        backend.advance(10.5)
        assert backend.deliver(execution_id) == "stalled"

    execution = backend.get(execution_id)
    assert (execution.status, execution.waiting_for["kind"]) == ("waiting", "stalled")
    assert execution.waiting_for["reason"] == execution.error["code"] == "UNKNOWN_VERSION"
    message = execution.error["message"]
    assert "started with version '1' of workflow 'contract.versions'" in message
    assert "not registered on this worker (registered: '2')" in message
    assert "@durableflow.workflow('contract.versions', version='1')" in message
    assert backend.records(execution_id) == before

    backend.retry(execution_id)  # both versions registered again
    assert backend.run(execution_id).result == {"version": 1, "shipped": "ship-1"}


def test_a_start_by_function_runs_that_functions_version(backend):
    execution_id = backend.start(order_v1)
    assert backend.get(execution_id).version == "1"
    assert backend.run(execution_id).result == {"version": 1, "shipped": "ship-1"}


def test_a_child_started_by_name_runs_the_newest_version(backend):
    @durableflow.workflow("contract.versions-parent")
    def parent(ctx, params):
        return ctx.step.invoke("child", "contract.versions")

    try:
        execution_id = backend.start("contract.versions-parent")
        backend.run(execution_id)
        child = backend.records(execution_id)[0].value
        assert backend.get(child).version == "2"
    finally:
        registry.unregister("contract.versions-parent")


@durableflow.workflow("contract.versions-pinned", version="1", default=True)
def pinned_v1(ctx, params):
    return 1


@durableflow.workflow("contract.versions-pinned", version="2")
def pinned_v2(ctx, params):
    return 2


def test_the_default_version_is_the_one_a_start_runs_though_another_is_newer(backend):
    execution_id = backend.start("contract.versions-pinned")
    assert backend.get(execution_id).version == "1"
    assert backend.run(execution_id).result == 1
    other = backend.start(pinned_v2)
    assert backend.run(other).result == 2


def test_a_fork_runs_the_version_its_origin_ran(backend):
    with only(order_v1):
        origin = backend.start("contract.versions")
        backend.run(origin)
    fork = backend.fork(origin, from_step="ship")
    assert fork.version == "1"
    assert backend.run(fork.id).result == {"version": 1, "shipped": "ship-1"}
