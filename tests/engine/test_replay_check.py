"""Replay checks: ``manage.py durableflow replay-check`` (the deploy gate), ``export`` and
``durableflow.testing.replay``. The code "deployed" is a ``registry.override``; the journals are
recorded by real deliveries (in memory, or on the project's database)."""

from __future__ import annotations

import io
import json
from datetime import timedelta

import pytest
from django.apps import apps
from django.core.management import CommandError, call_command
from django.db import DatabaseError, connection, transaction
from django.utils import timezone

import durableflow
from durableflow import NonDeterminismError
from durableflow.models import Execution
from durableflow.registry import WorkflowDefinition, registry
from durableflow.testing import WorkflowTester, replay
from tests.harness import OrmHarness

NAME = "t.replay-check"


def reserve(order):
    return f"r-{order}"


@durableflow.workflow(NAME)
def order_v1(ctx, params):
    ctx.step.run("reserve", reserve, params["order"])
    ctx.step.sleep("nap", 3600)
    return ctx.step.run("ship", reserve, params["order"])


def kind_changed(ctx, params):
    ctx.step.sleep("reserve", 1)  # the recorded run step is now a sleep: stalls
    return "changed"


def behind_a_patch(ctx, params):
    ctx.step.run("reserve", reserve, params["order"])
    if ctx.patched("audit"):
        ctx.step.run("audit", reserve, params["order"])
    ctx.step.sleep("nap", 3600)
    return ctx.step.run("ship", reserve, params["order"])


def step_inserted(ctx, params):
    ctx.step.run("reserve", reserve, params["order"])
    ctx.step.run("audit", reserve, params["order"])  # not behind ctx.patched(): runs before the recorded nap
    ctx.step.sleep("nap", 3600)
    return ctx.step.run("ship", reserve, params["order"])


def deploy(fn, version="1"):
    return registry.override(WorkflowDefinition(NAME, fn, version=version))


# In memory: the tester and durableflow.testing.replay ------------------------------------------


@pytest.fixture
def napping():
    tester = WorkflowTester()
    execution = tester.start(NAME, {"order": 7})
    tester.run()  # reserved, napping
    return tester, execution.id


def test_the_code_that_recorded_a_journal_replays_it(napping):
    tester, execution_id = napping
    verdict = tester.replay(execution_id)
    assert (verdict.ok, verdict.replayed, verdict.step) == (True, 2, "nap")


def test_a_changed_step_kind_is_named_where_it_diverges(napping):
    tester, execution_id = napping
    with pytest.raises(NonDeterminismError, match=r"recorded step 'reserve' as a 'run' step where a 'sleep'") as caught:
        tester.replay(execution_id, kind_changed)
    assert (caught.value.code, caught.value.detail["step"]) == ("NON_DETERMINISM", "reserve")


def test_a_change_behind_ctx_patched_replays(napping):
    tester, execution_id = napping
    assert tester.replay(execution_id, behind_a_patch).ok


def test_a_step_added_before_recorded_ones_is_reported(napping):
    tester, execution_id = napping
    with pytest.raises(NonDeterminismError, match=r"reaches step 'audit'.*goes on with 'nap'") as caught:
        tester.replay(execution_id, step_inserted)
    assert caught.value.code == "NEW_STEP"


def test_a_version_no_longer_registered_is_reported(napping):
    tester, execution_id = napping
    with deploy(order_v1, version="2"):
        with pytest.raises(NonDeterminismError, match=r"version '1' .* not registered") as caught:
            tester.replay(execution_id)
    assert caught.value.code == "UNKNOWN_VERSION"


def test_an_exported_journal_replays_without_a_database(napping):
    tester, execution_id = napping
    exported = json.dumps(tester.export(execution_id))
    assert replay(exported).ok
    assert replay(json.loads(exported), behind_a_patch).ok
    with pytest.raises(NonDeterminismError):
        replay(exported, kind_changed)
    with pytest.raises(TypeError, match="exported execution"):
        replay({"execution": {}})


def test_a_replay_runs_no_step_body_and_stops_before_the_live_step():
    calls = []

    def counted(ctx, params):
        ctx.step.run("reserve", calls.append, "reserve")
        ctx.step.run("ship", calls.append, "ship")  # the journal has no record: a worker would run it

    tester = WorkflowTester()
    with deploy(counted):
        execution = tester.start(NAME, {"order": 1})
        tester.run()
        calls.clear()
        records = tester.records(execution.id)
        exported = tester.export(execution.id)
        exported["journal"] = exported["journal"][:1]  # as if the delivery died after "reserve"
        assert replay(exported).step == "ship"
    assert calls == [] and tester.records(execution.id) == records


# On the database: the commands ------------------------------------------------------------------


def _counts() -> dict[str, int]:
    return {model.__name__: model.objects.count() for model in apps.get_app_config("durableflow").get_models()}


@pytest.fixture
def journals(db):
    """Two executions napping (orders 1 and 2), one finished (order 3)."""
    harness = OrmHarness()
    try:
        ids = [harness.start(NAME, {"order": n}) for n in (1, 2, 3)]
        for execution_id in ids:
            harness.deliver(execution_id)
        harness.advance(3601)
        harness.deliver(ids[2])
        assert harness.get(ids[2]).status == "completed"
    finally:
        harness.close()
    for n, execution_id in enumerate(ids):  # started a minute apart, the last one newest
        Execution.objects.filter(pk=execution_id).update(created_at=timezone.now() - timedelta(minutes=3 - n))
    return ids


def check(*argv: str) -> tuple[int, str]:
    out = io.StringIO()
    try:
        call_command("durableflow", "replay-check", *argv, stdout=out)
    except SystemExit as exit:
        return exit.code, out.getvalue()
    return 0, out.getvalue()


def test_replay_check_passes_the_code_that_recorded_the_journals(journals):
    assert check() == (0, "2 executions checked, 0 would not replay\n")
    assert check("--finished") == (0, "3 executions checked, 0 would not replay\n")


def test_replay_check_flags_a_changed_step_kind_exits_1_and_writes_nothing(journals):
    before = _counts()
    with deploy(kind_changed):
        code, out = check()
    assert _counts() == before
    assert code == 1
    lines = out.splitlines()
    assert lines[-1] == "2 executions checked, 2 would not replay"
    assert f"{journals[1]} {NAME} version 1 (waiting): NON_DETERMINISM at step 'reserve': " in lines[0]
    assert journals[0] in lines[1]  # newest first


def test_replay_check_passes_a_change_behind_ctx_patched(journals):
    with deploy(behind_a_patch):
        assert check("--finished")[0] == 0


def test_replay_check_selects_by_workflow_last_and_since_and_answers_json(journals):
    with deploy(kind_changed):
        code, out = check("--json", "--last", "1")
        assert check("--workflow", "t.steps") == (0, "0 executions checked, 0 would not replay\n")
        assert check("--since", "2999-01-01")[1].startswith("0 executions")
        assert "\n2 executions checked, 2 would not replay" in check("--since", "1h")[1]
    answer = json.loads(out)
    assert (code, answer["checked"]) == (1, 1)
    assert [(d["execution_id"], d["code"], d["step"]) for d in answer["diverging"]] == [
        (journals[1], "NON_DETERMINISM", "reserve")
    ]


@pytest.mark.parametrize("argv", [["--last", "0"], ["--since", "soon"], ["--since", "2026-13-45"]])
def test_replay_check_refuses_bad_options(journals, argv):
    with pytest.raises(CommandError):
        call_command("durableflow", "replay-check", *argv)


@pytest.mark.skipif(connection.vendor != "postgresql", reason="database roles: PostgreSQL")
def test_replay_check_runs_as_a_role_that_may_only_read(journals):
    with connection.cursor() as cursor:
        cursor.execute("CREATE ROLE durableflow_replay_reader NOLOGIN")
        cursor.execute("GRANT SELECT ON ALL TABLES IN SCHEMA public TO durableflow_replay_reader")
        cursor.execute("SET ROLE durableflow_replay_reader")
    try:
        with pytest.raises(DatabaseError, match="permission denied"), transaction.atomic():
            Execution.objects.filter(pk=journals[0]).update(queue="x")  # the role is in force
        with deploy(kind_changed):
            assert check("--finished")[0] == 1
        assert check("--finished")[0] == 0
    finally:
        with connection.cursor() as cursor:
            cursor.execute("RESET ROLE")


def test_export_writes_the_execution_and_its_journal_for_replay(journals):
    out = io.StringIO()
    call_command("durableflow", "export", journals[0], stdout=out)
    data = json.loads(out.getvalue())
    assert data["execution"]["id"] == journals[0] and data["execution"]["status"] == "waiting"
    assert [(r["key"], r["kind"], r["status"]) for r in data["journal"]] == [
        ("reserve", "run", "completed"),
        ("nap", "sleep", "waiting"),
    ]
    assert replay(out.getvalue()).ok
    assert replay(journals[0]).ok  # by id, from the database
    with pytest.raises(CommandError, match="no execution"):
        call_command("durableflow", "export", "nope")
