"""The admin over 100,000 executions: a bounded number of queries per page, none per row, and
never a COUNT(*) of the whole table."""

from __future__ import annotations

import random
import re
import uuid
from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone

from durableflow.models import Execution, StepRecord

ROWS = 100_000
COPIES = 100


def bulk_history(rows: int) -> None:
    """``rows`` executions over 90 days: a hundredth through the ORM, the rest copied from them
    by one INSERT ... SELECT (the ORM alone takes a minute for 100,000 rows on SQLite)."""
    rng = random.Random(14)
    now = timezone.now()
    statuses = ["completed"] * 90 + ["failed"] * 6 + ["cancelled"] * 2 + ["waiting"] * 2
    base = []
    for n in range(rows // COPIES):
        created = now - timedelta(seconds=rng.uniform(0, 90 * 86400))
        status = rng.choice(statuses)
        waiting = status == "waiting"
        base.append(
            Execution(
                id=uuid.UUID(int=rng.getrandbits(128)).hex,
                workflow=f"wf-{n % 20:02d}",
                status=status,
                params={"n": n},
                queue="q",
                root_id="r",
                created_at=created,
                enqueued_at=created,
                started_at=created,
                finished_at=None if waiting else created + timedelta(seconds=3),
                waiting_for={"kind": "timer", "step": "nap", "until": (now + timedelta(days=1)).isoformat()}
                if waiting
                else None,
                wake_at=now + timedelta(days=1) if waiting else None,
                error={"code": "STEP_FAILED", "message": "boom", "traceback": "x" * 4000}
                if status == "failed"
                else None,
                idempotency_key=f"key-{n}" if n % 10 == 0 else None,
                deliveries=1,
            )
        )
    Execution.objects.bulk_create(base)
    columns = [field.column for field in Execution._meta.concrete_fields]
    copied = {
        "id": "e.id || '-' || v.column1",
        "idempotency_key": "CASE WHEN e.idempotency_key IS NULL THEN NULL ELSE e.idempotency_key || '-' || v.column1 END",
    }
    numbers = ", ".join(f"({k})" for k in range(1, COPIES))
    with connection.cursor() as cursor:
        cursor.execute(
            f"INSERT INTO durableflow_execution ({', '.join(columns)}) "
            f"SELECT {', '.join(copied.get(c, f'e.{c}') for c in columns)} "
            f"FROM durableflow_execution e CROSS JOIN (VALUES {numbers}) v"
        )
    assert Execution.objects.count() >= rows


def captured(client, url: str) -> list[str]:
    with CaptureQueriesContext(connection) as queries:
        response = client.get(url)
    assert response.status_code == 200, url
    return [query["sql"] for query in queries.captured_queries]


def rows_on(client, url: str) -> int:
    return len(re.findall(r'name="_selected_action"', client.get(url).content.decode()))


def assert_no_full_count(statements: list[str]) -> None:
    for sql in statements:
        if "COUNT(" in sql.upper():
            assert "LIMIT" in sql.upper(), f"an unbounded count: {sql}"


@pytest.mark.django_db
def test_the_changelist_over_100k_executions_runs_the_same_few_queries_whatever_the_page(admin_client):
    bulk_history(ROWS)
    one = Execution.objects.filter(idempotency_key="key-500").get()
    changelist = reverse("admin:durableflow_execution_changelist")
    year = timezone.localtime(one.created_at).year
    pages = {
        "all": changelist,
        "failed": f"{changelist}?status__exact=failed",
        "workflow": f"{changelist}?workflow=wf-07",
        "workflow and status": f"{changelist}?workflow=wf-07&status__exact=waiting",
        "a year": f"{changelist}?created_at__year={year}",
        "page 3": f"{changelist}?p=3",
        "search by key": f"{changelist}?q=key-500",
        "search by id": f"{changelist}?q={one.id}",
    }
    admin_client.get(changelist)  # the session and the user's row, loaded once

    counts = {name: captured(admin_client, url) for name, url in pages.items()}

    assert rows_on(admin_client, pages["all"]) == 50 and rows_on(admin_client, pages["search by key"]) == 1
    sizes = {name: len(statements) for name, statements in counts.items()}
    # A one-row page and a fifty-row page ask the same questions: session, user, count, page,
    # the date hierarchy's first and last date and the workflow filter's document names;
    # nothing per row. (The unfiltered list may also ask PostgreSQL for its estimate.)
    filtered = {size for name, size in sizes.items() if name not in ("all", "page 3")}
    assert len(filtered) == 1 and max(sizes.values()) <= 8, sizes
    for statements in counts.values():
        assert_no_full_count(statements)
    body = admin_client.get(pages["all"]).content.decode()
    assert re.search(r'<span class="df-count">(about|more than) [\d,]+</span> executions', body)


@pytest.mark.django_db
@pytest.mark.skipif(connection.vendor != "postgresql", reason="the planner's estimate is PostgreSQL's")
def test_the_unfiltered_changelist_reads_the_planners_estimate_on_postgresql(admin_client):
    bulk_history(20_000)
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE durableflow_execution")
    try:
        statements = captured(admin_client, reverse("admin:durableflow_execution_changelist"))
        body = admin_client.get(reverse("admin:durableflow_execution_changelist")).content.decode()
    finally:
        # ANALYZE's estimate outlives the test's rollback: leave it describing an empty table.
        with connection.cursor() as cursor:
            cursor.execute("DELETE FROM durableflow_execution")
            cursor.execute("ANALYZE durableflow_execution")

    assert not [sql for sql in statements if "COUNT(" in sql.upper()]
    assert any("reltuples" in sql for sql in statements)
    assert re.search(r'<span class="df-count">about [\d,]+</span> executions', body)


@pytest.mark.django_db
def test_the_execution_page_runs_the_same_few_queries_for_a_long_journal(admin_client):
    bulk_history(ROWS)
    now = timezone.now()
    short, long = Execution.objects.filter(status="completed")[:2]

    def journal(execution, steps):
        StepRecord.objects.bulk_create(
            StepRecord(
                execution=execution,
                key=f"s{n}",
                kind="run",
                status="completed",
                attempts=1,
                value={"n": n, "items": list(range(n % 30))},
                started_at=now + timedelta(seconds=n),
                finished_at=now + timedelta(seconds=n, milliseconds=300),
            )
            for n in range(steps)
        )

    journal(short, 1)
    journal(long, 300)
    children = list(Execution.objects.filter(status="waiting").values_list("pk", flat=True)[:25])
    Execution.objects.filter(pk__in=children).update(parent=long)
    admin_client.get(reverse("admin:durableflow_execution_change", args=[short.pk]))

    few = captured(admin_client, reverse("admin:durableflow_execution_change", args=[short.pk]))
    many = captured(admin_client, reverse("admin:durableflow_execution_change", args=[long.pk]))

    body = admin_client.get(reverse("admin:durableflow_execution_change", args=[long.pk])).content.decode()
    assert body.count('class="df-step ') == 300 and body.count('<ul class="df-children">') == 1
    # session, user, execution, journal, streams, waits, children, reruns/forks (each one bounded read off
    # an index; a run's streams, when it has some, add one read each)
    assert len(few) == len(many) <= 8, "\n".join(many)
    assert_no_full_count(many)


@pytest.mark.django_db
@pytest.mark.parametrize(
    "panel, index",
    [
        (
            lambda pk: Execution.objects.filter(parent_id=pk).only("id", "workflow", "status", "created_at")[:21],
            "durableflow_exec_children",
        ),
        (
            lambda pk: Execution.objects.filter(origin_id=pk).only("id", "status").order_by("-created_at", "-id")[:21],
            "durableflow_exec_origin_latest",
        ),
    ],
    ids=["children", "reruns-and-forks"],
)
def test_the_execution_pages_lineage_panels_read_their_own_index(panel, index):
    """Filter and order in one index: on SQLite the "latest" index would otherwise win and the
    page would filter the whole table (2.5 s at 10^6 executions in the bench)."""
    query = panel("some-execution")
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:  # the test table is tiny: make the planner choose as it would on a big one
            cursor.execute("SET LOCAL enable_seqscan = off")
            plan = query.explain()
    else:
        plan = query.explain()
    assert index in plan, plan
