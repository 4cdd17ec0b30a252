"""The conditions storages select executions by: one definition, the same answer everywhere.

Each condition of ``durableflow.engine.predicates`` is asked of the same rows, at the same
moment, three ways: evaluated in Python (what the memory storage does), as a ``Q`` on the ORM
and as the SQL text the hand-written claim embeds. The rows sit on every boundary (a lease that
expires exactly now, a timer due exactly now, a wake-up exactly as old as the re-send delay,
NULLs), and the three answers must agree, as must the meaning of each boundary.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from types import SimpleNamespace

import pytest
from django.db import connection

from durableflow.engine import predicates
from durableflow.engine.states import ExecutionStatus as S
from durableflow.models import Execution
from durableflow.orm.predicates import to_q, to_sql

NOW = datetime(2026, 12, 3, 12, 0, 0, 500000, tzinfo=UTC)
SECOND = timedelta(seconds=1)
REDELIVER = 30.0
FIELDS = ("status", "lease_token", "lease_expires_at", "wake_at", "enqueued_at", "concurrency_ticket",
          "deadline_at", "cancel_requested")  # fmt: skip

ROWS = {
    "pending, never leased": {"status": S.PENDING},
    "lease expires exactly now": {"status": S.RUNNING, "lease_token": "t", "lease_expires_at": NOW},
    "lease expired a microsecond ago": {
        "status": S.RUNNING, "lease_token": "t", "lease_expires_at": NOW - timedelta(microseconds=1)},
    "lease live": {"status": S.RUNNING, "lease_token": "t", "lease_expires_at": NOW + SECOND},
    "lease taken over": {"status": S.RUNNING, "lease_token": "gone", "lease_expires_at": NOW + SECOND},
    "waiting, due exactly now": {"status": S.WAITING, "wake_at": NOW},
    "waiting, due in a second": {"status": S.WAITING, "wake_at": NOW + SECOND},
    "waiting, no timer": {"status": S.WAITING},
    "queued behind its key": {"status": S.PENDING, "concurrency_ticket": 3},
    "wake-up exactly as old as the re-send delay": {
        "status": S.PENDING, "enqueued_at": NOW - timedelta(seconds=REDELIVER)},
    "wake-up older than the re-send delay": {
        "status": S.PENDING, "enqueued_at": NOW - timedelta(seconds=REDELIVER + 1)},
    "deadline exactly now": {"status": S.RUNNING, "deadline_at": NOW},
    "deadline now, being cancelled": {"status": S.RUNNING, "deadline_at": NOW, "cancel_requested": {"code": "X"}},
    "completed past its deadline": {"status": S.COMPLETED, "deadline_at": NOW - SECOND},
}  # fmt: skip
CONDITIONS = {
    "claimable": predicates.CLAIMABLE,
    "lease free": predicates.LEASE_FREE,
    "due": predicates.DUE,
    "stale": predicates.STALE,
    "overdue": predicates.OVERDUE,
    "lease live": predicates.LEASE_LIVE,
    "lease expired": predicates.LEASE_EXPIRED,
}
PARAMS = {"take_over": "gone", "redeliver_after": REDELIVER}


def _in_python(condition, fields) -> bool:
    row = SimpleNamespace(**{name: fields.get(name) for name in FIELDS})
    return predicates.holds(condition, row, NOW, PARAMS)


@pytest.fixture
def stored(db):
    """Every row of ``ROWS``, saved: name -> primary key."""
    for index, (name, fields) in enumerate(ROWS.items()):
        Execution.objects.create(id=f"row-{index}", workflow="w", **{"enqueued_at": NOW, **fields})
    return {name: f"row-{index}" for index, name in enumerate(ROWS)}


def _by_q(condition, pk) -> bool:
    return Execution.objects.filter(pk=pk).filter(to_q(condition, NOW, PARAMS)).exists()


def _by_sql(condition, pk) -> bool:
    ops, qn = connection.ops, connection.ops.quote_name
    cast = "::timestamptz" if connection.vendor == "postgresql" else ""
    text = "::text" if connection.vendor == "postgresql" else ""
    now = f"%(now)s{cast}"
    if connection.vendor == "postgresql":
        ago = lambda name: f"({now} - %({name})s * INTERVAL '1 second')"  # noqa: E731
        values = {"now": NOW, **PARAMS}
    else:  # the parameter is the moment itself, as stored
        ago = lambda name: f"%(ago_{name})s"  # noqa: E731
        values = {"now": ops.adapt_datetimefield_value(NOW), "take_over": PARAMS["take_over"],
                  "ago_redeliver_after": ops.adapt_datetimefield_value(NOW - timedelta(seconds=REDELIVER))}  # fmt: skip
    column = lambda field: qn(Execution._meta.get_field(field).column)  # noqa: E731
    where = to_sql(condition, column, now, lambda name: f"%({name})s{text}", ago)
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT 1 FROM {qn(Execution._meta.db_table)} WHERE {qn('id')} = %(pk)s AND {where}",
                       {**values, "pk": pk})  # fmt: skip
        return cursor.fetchone() is not None


@pytest.mark.parametrize("condition", CONDITIONS)
def test_every_condition_answers_the_same_in_python_in_q_and_in_sql(stored, condition):
    predicate = CONDITIONS[condition]
    answers = {
        name: (
            predicates.holds(predicate, Execution.objects.get(pk=pk), NOW, PARAMS),
            _by_q(predicate, pk),
            _by_sql(predicate, pk),
        )
        for name, pk in stored.items()
    }
    disagree = {name: answer for name, answer in answers.items() if len(set(answer)) != 1}
    assert not disagree, f"{condition}: (python, q, sql) differ for {disagree}"


@pytest.mark.parametrize(
    "condition, row, expected",
    [
        ("lease free", "lease expires exactly now", False),  # free only once expired before now
        ("lease free", "lease expired a microsecond ago", True),
        ("lease free", "lease taken over", True),
        ("lease expired", "lease expires exactly now", False),
        ("lease live", "lease expires exactly now", True),
        ("claimable", "lease expires exactly now", False),
        ("claimable", "waiting, due exactly now", True),  # due at its moment
        ("claimable", "waiting, due in a second", False),
        ("claimable", "waiting, no timer", False),
        ("claimable", "queued behind its key", False),
        ("due", "waiting, due exactly now", True),
        ("stale", "wake-up exactly as old as the re-send delay", False),
        ("stale", "wake-up older than the re-send delay", True),
        ("overdue", "deadline exactly now", True),
        ("overdue", "deadline now, being cancelled", False),
        ("overdue", "completed past its deadline", False),
    ],
)
def test_the_boundaries_mean_what_the_engine_says(condition, row, expected):
    assert _in_python(CONDITIONS[condition], ROWS[row]) is expected


def test_the_claim_statement_embeds_the_claimable_condition():
    from durableflow.orm.sql import statements

    claim = statements(connection).claim_sql
    column = lambda field: connection.ops.quote_name(Execution._meta.get_field(field).column)  # noqa: E731
    assert column("concurrency_ticket") + " IS NULL" in claim
    assert "%(take_over)s" in claim


# An item task's claim: over its step record (started_at: when its attempt started or it was sent).
LEASE = 60.0
ITEM_ROWS = {
    "waiting, sent": ({"status": "waiting", "started_at": NOW}, True),
    "waiting, not sent yet": ({"status": "waiting"}, True),
    "running, started exactly a lease ago": ({"status": "running", "started_at": NOW - timedelta(seconds=LEASE)}, False),
    "running, started a lease and a microsecond ago": (
        {"status": "running", "started_at": NOW - timedelta(seconds=LEASE, microseconds=1)}, True),
    "running, started just now": ({"status": "running", "started_at": NOW}, False),
    "completed long ago": ({"status": "completed", "started_at": NOW - timedelta(days=1)}, False),
}  # fmt: skip


@pytest.fixture
def items(db):
    from durableflow.models import StepRecord

    Execution.objects.create(id="items", workflow="w", enqueued_at=NOW)
    for index, (fields, _) in enumerate(ITEM_ROWS.values()):
        StepRecord.objects.create(execution_id="items", key=f"i{index}", kind="item", **fields)
    return {name: f"i{index}" for index, name in enumerate(ITEM_ROWS)}


def _item_by_sql(key: str) -> bool:
    from durableflow.models import StepRecord

    qn = connection.ops.quote_name
    if connection.vendor == "postgresql":
        now, values = "%(now)s::timestamptz", {"now": NOW, "lease_seconds": LEASE}
        ago = lambda name: f"({now} - %({name})s * INTERVAL '1 second')"  # noqa: E731
    else:
        adapt = connection.ops.adapt_datetimefield_value
        now, values = "%(now)s", {"now": adapt(NOW), "ago": adapt(NOW - timedelta(seconds=LEASE))}
        ago = lambda name: "%(ago)s"  # noqa: E731
    column = lambda field: qn(StepRecord._meta.get_field(field).column)  # noqa: E731
    where = to_sql(predicates.ITEM_CLAIMABLE, column, now, lambda name: f"%({name})s", ago)
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT 1 FROM {qn(StepRecord._meta.db_table)} WHERE {qn('key')} = %(key)s AND {where}",
                       {**values, "key": key})  # fmt: skip
        return cursor.fetchone() is not None


def test_an_item_may_start_when_waiting_or_once_its_attempt_is_older_than_the_lease_in_python_and_in_sql(items):
    from durableflow.models import StepRecord

    answers = {
        name: (
            predicates.holds(predicates.ITEM_CLAIMABLE, StepRecord.objects.get(key=key), NOW, {"lease_seconds": LEASE}),
            _item_by_sql(key),
        )
        for name, key in items.items()
    }
    assert answers == {name: (expected, expected) for name, (_, expected) in ITEM_ROWS.items()}
