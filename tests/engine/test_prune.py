"""``manage.py durableflow prune``, its ages, and the ``durableflow.prune`` task on a real worker.

What a prune deletes and keeps is held against both storages in ``test_contract_prune.py``."""

from __future__ import annotations

import io
from datetime import timedelta

import pytest
from django.core.management import CommandError, call_command
from django.utils import timezone

import durableflow
from durableflow import dispatch
from durableflow.models import Execution, StepRecord
from durableflow.operations import parse_age
from tests.harness import OrmHarness
from tests.helpers import uid, wait_for, wait_status


@pytest.mark.parametrize(
    "value, expected",
    [
        ("30d", timedelta(days=30)),
        ("12h", timedelta(hours=12)),
        ("15m", timedelta(minutes=15)),
        ("90s", timedelta(seconds=90)),
        ("90", timedelta(seconds=90)),
        ("2w", timedelta(weeks=2)),
        ("1.5h", timedelta(minutes=90)),
        (" 7D ", timedelta(days=7)),
        ("P30D", timedelta(days=30)),
        ("PT12H", timedelta(hours=12)),
        (3600, timedelta(hours=1)),
        (0.5, timedelta(milliseconds=500)),
        (timedelta(days=1), timedelta(days=1)),
    ],
)
def test_an_age_is_a_number_with_a_unit_seconds_or_iso_8601(value, expected):
    assert parse_age(value) == expected


@pytest.mark.parametrize("value", ["soon", "-3d", "30x", "", "d", "P-1D", True, None, [30]])
def test_anything_else_is_refused_with_what_is_accepted(value):
    with pytest.raises(ValueError, match=r"is not an age: give a number with a unit \(30d, 12h"):
        parse_age(value)


def _finished_long_ago(count: int, days: int) -> list[str]:
    harness = OrmHarness()
    try:
        ids = [harness.start("t.loop", {"n": 2}) for _ in range(count)]
        for execution_id in ids:
            assert harness.run(execution_id).status == "completed"
    finally:
        harness.close()
    Execution.objects.filter(pk__in=ids).update(finished_at=timezone.now() - timedelta(days=days))
    return ids


def test_the_command_deletes_runs_finished_longer_ago_and_says_how_many(db):
    old = _finished_long_ago(2, days=40)
    recent = _finished_long_ago(1, days=10)
    out = io.StringIO()

    call_command("durableflow", "prune", "--older-than", "30d", stdout=out)

    assert out.getvalue().strip() == "deleted 2 executions that finished more than 30d ago"
    assert not Execution.objects.filter(pk__in=old).exists()
    assert not StepRecord.objects.filter(execution_id__in=old).exists()
    assert StepRecord.objects.filter(execution_id__in=recent).count() == 2


@pytest.mark.parametrize(
    "argv, message",
    [
        (["prune", "--older-than", "soon"], "'soon' is not an age"),
        (["prune", "--older-than", "30d", "--batch", "0"], "--batch must be at least 1"),
        (["prune"], "the following arguments are required: --older-than"),
        ([], "the following arguments are required: command"),
    ],
)
def test_the_command_refuses_bad_input_and_deletes_nothing(db, argv, message):
    kept = _finished_long_ago(1, days=400)
    with pytest.raises(CommandError, match=message):
        call_command("durableflow", *argv)
    assert Execution.objects.filter(pk__in=kept).exists()


@pytest.mark.integration
def test_the_prune_task_runs_on_a_worker(cluster, live_db):
    old = durableflow.start("t.marker", {"tag": uid("prune-old")})
    kept = durableflow.start("t.marker", {"tag": uid("prune-kept")})
    wait_status(old.id), wait_status(kept.id)
    # Finished ten years ago: the age below reaches it and nothing any other test left behind.
    Execution.objects.filter(pk=old.id).update(finished_at=timezone.now() - timedelta(days=3660))

    dispatch.send(dispatch.PRUNE, ("3650d",), "durableflow")

    wait_for(lambda: not Execution.objects.filter(pk=old.id).exists(), timeout=60, what="the worker's prune")
    assert not StepRecord.objects.filter(execution_id=old.id).exists()
    assert StepRecord.objects.filter(execution_id=kept.id).count() == 1
