"""Patches, held against both storages: ``ctx.patched(id)`` is True (its marker journaled, kind
``patch``) where the journal has nothing at that point yet or holds the marker, False (nothing
recorded) where the old code already recorded past it; ``ctx.deprecate_patch(id)`` replays the
runs holding the marker and stalls, losing nothing, those that took the old branch.

A deploy is shown as ``registry.override``: the same workflow name and version, new code.
"""

from __future__ import annotations

import pytest

import durableflow
from durableflow import WorkflowValueError
from durableflow.registry import WorkflowDefinition, registry
from durableflow.testing import WorkflowTester
from tests.contract.calls import call, calls

pytestmark = pytest.mark.usefixtures("call_log")


@durableflow.workflow("contract.patch-order")
def old_wf(ctx, params):
    """The code before the deploy: reserve, nap, ship."""
    ctx.step.run("reserve", call, "reserve")
    ctx.step.sleep("nap", 10)
    return ctx.step.run("ship", call, "ship")


def patched_wf(ctx, params):
    """After the deploy: a fraud check between reserve and the nap, for the runs that can take it."""
    ctx.step.run("reserve", call, "reserve")
    checked = False
    if ctx.patched("fraud-check"):
        checked = ctx.step.run("check", call, "check") == "check"
    ctx.step.sleep("nap", 10)
    return {"shipped": ctx.step.run("ship", call, "ship"), "checked": checked}


def deprecated_wf(ctx, params):
    """Later still: the old branch is gone."""
    ctx.step.run("reserve", call, "reserve")
    ctx.deprecate_patch("fraud-check")
    ctx.step.run("check", call, "check")
    ctx.step.sleep("nap", 10)
    return {"shipped": ctx.step.run("ship", call, "ship"), "checked": True}


def deploy(fn):
    return registry.override(WorkflowDefinition("contract.patch-order", fn))


def kinds(backend, execution_id):
    return [(r.key, r.kind) for r in backend.records(execution_id)]


def test_a_new_run_takes_the_patch_and_journals_its_marker(backend):
    with deploy(patched_wf):
        execution_id = backend.start("contract.patch-order")
        assert backend.run(execution_id).result == {"shipped": "ship", "checked": True}

    assert kinds(backend, execution_id) == [
        ("reserve", "run"),
        ("$patch:fraud-check", "patch"),
        ("check", "run"),
        ("nap", "sleep"),
        ("ship", "run"),
    ]
    marker = backend.records(execution_id)[1]
    assert (marker.status, marker.attempts, marker.meta) == ("completed", 1, {"patch": "fraud-check"})
    # Replayed after the nap, the marker answered True again without being written twice.
    assert calls == ["reserve", "check", "ship"]


def test_a_run_past_the_patch_replays_the_old_branch(backend):
    execution_id = backend.start("contract.patch-order")
    backend.deliver(execution_id)  # reserve, then napping: past the patch's point
    before = kinds(backend, execution_id)

    with deploy(patched_wf):
        execution = backend.run(execution_id)

    assert execution.status == "completed"
    assert execution.result == {"shipped": "ship", "checked": False}
    assert kinds(backend, execution_id) == before + [("ship", "run")]  # no marker, no check
    assert calls == ["reserve", "ship"]


def test_a_run_not_yet_at_the_patch_takes_the_new_branch(backend):
    execution_id = backend.start("contract.patch-order")
    journal = backend.journal(execution_id)
    claim = journal.claim()  # a first delivery that dies before its first step is recorded
    assert claim is not None and claim.records == {}
    journal.close()
    backend.advance(3600)

    with deploy(patched_wf):
        execution = backend.run(execution_id)

    assert execution.result == {"shipped": "ship", "checked": True}
    assert ("$patch:fraud-check", "patch") in kinds(backend, execution_id)


def test_the_marker_keeps_a_patched_run_on_the_new_branch_whatever_comes_after(backend):
    with deploy(patched_wf):
        execution_id = backend.start("contract.patch-order")
        backend.deliver(execution_id)  # reserve, marker, check, napping
    assert calls == ["reserve", "check"]

    with deploy(deprecated_wf):
        execution = backend.run(execution_id)

    assert execution.result == {"shipped": "ship", "checked": True}
    assert calls == ["reserve", "check", "ship"]
    assert [key for key, _ in kinds(backend, execution_id)].count("$patch:fraud-check") == 1


def test_deprecating_a_patch_stalls_a_run_that_took_the_old_branch_and_loses_nothing(backend):
    execution_id = backend.start("contract.patch-order")
    backend.deliver(execution_id)
    before = backend.records(execution_id)

    with deploy(deprecated_wf):
        backend.advance(10.5)
        assert backend.deliver(execution_id) == "stalled"

    execution = backend.get(execution_id)
    assert (execution.status, execution.waiting_for["kind"]) == ("waiting", "stalled")
    assert execution.error["code"] == "NON_DETERMINISM"
    assert "old branch of patch 'fraud-check'" in execution.error["message"]
    assert "ctx.patched('fraud-check')" in execution.error["message"]
    assert backend.records(execution_id) == before

    # The patched code is deployed again: the run goes on down its old branch.
    with deploy(patched_wf):
        backend.retry(execution_id)
        assert backend.run(execution_id).result == {"shipped": "ship", "checked": False}


def test_deprecate_patch_journals_the_marker_so_a_rollback_still_replays(backend):
    with deploy(deprecated_wf):
        execution_id = backend.start("contract.patch-order")
        backend.deliver(execution_id)  # reserve, marker, check, napping
    assert kinds(backend, execution_id)[1] == ("$patch:fraud-check", "patch")

    # Rolled back to the patched code, the run replays down the new branch: it holds the marker.
    with deploy(patched_wf):
        assert backend.run(execution_id).result == {"shipped": "ship", "checked": True}
    assert calls == ["reserve", "check", "ship"]


def test_a_marker_left_by_removed_code_is_not_work_done_past_a_later_patch(backend):
    def with_a_late_patch(ctx, params):
        ctx.step.run("reserve", call, "reserve")
        ctx.step.sleep("nap", 10)
        extra = ctx.patched("gift-wrap")  # the deprecated patch's call is gone from this code
        return {"shipped": ctx.step.run("ship", call, "ship"), "wrapped": extra}

    with deploy(deprecated_wf):
        execution_id = backend.start("contract.patch-order")
        backend.deliver(execution_id)
    # reserve, $patch:fraud-check, check, napping: the journal's "check" is unreached by the new code,
    # so the late patch must answer False; the marker alone would not have made it so.
    with deploy(with_a_late_patch):
        assert backend.run(execution_id).result == {"shipped": "ship", "wrapped": False}


def _asked_twice(ctx, params):
    first = ctx.patched("twice")
    ctx.step.sleep("nap", 1)
    return [first, ctx.patched("twice")]


def test_asking_twice_gives_the_same_answer(backend):
    with deploy(_asked_twice):
        execution_id = backend.start("contract.patch-order")
        assert backend.run(execution_id).result == [True, True]
    assert [key for key, _ in kinds(backend, execution_id)] == ["$patch:twice", "nap"]


def test_a_patch_id_that_cannot_be_journaled_is_refused_in_workflow_code(backend):
    def bad_ids(ctx, params):
        found = []
        for patch_id in ("", "x" * 300, "nul\x00"):
            try:
                ctx.patched(patch_id)
            except WorkflowValueError as exc:
                found.append(exc.code)
        try:
            ctx.patched(7)
        except TypeError:
            found.append("type")
        return found

    with deploy(bad_ids):
        execution_id = backend.start("contract.patch-order")
        assert backend.run(execution_id).result == ["INVALID_STEP_KEY"] * 3 + ["type"]
    assert backend.records(execution_id) == []


def test_patched_inside_a_step_body_is_refused(backend):
    def nested(ctx, params):
        try:
            ctx.step.run("outer", lambda: ctx.patched("inner"))
        except WorkflowValueError as exc:
            return exc.code

    with deploy(nested):
        execution_id = backend.start("contract.patch-order")
        assert backend.run(execution_id).result == "NESTED_STEP"


def test_the_tester_replays_patches_like_the_workers():
    tester = WorkflowTester()
    old = tester.start("contract.patch-order")
    tester.run()  # napping, past the patch's point
    with deploy(patched_wf):
        new = tester.start("contract.patch-order")
        assert tester.run_until_finished(old.id) == {"shipped": "ship", "checked": False}
        assert tester.run_until_finished(new.id) == {"shipped": "ship", "checked": True}
    with deploy(deprecated_wf):
        fresh = tester.start("contract.patch-order")
        tester.run()
        assert tester.get(fresh.id).waiting_for["kind"] == "timer"  # napping, not stalled
        assert tester.run_until_finished(fresh.id) == {"shipped": "ship", "checked": True}
