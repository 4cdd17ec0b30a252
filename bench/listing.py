"""The admin/API list query and the sweep's queries, on a small and on a very large history.

Runs in its own process against its own database: it fills ``durableflow_execution`` with
a history that grows (finished runs) around a steady set of live ones, the way a real
installation does, and times the queries at each size.
"""

from __future__ import annotations

import random
import uuid
from datetime import timedelta
from typing import Any, Callable

from django.db import connection
from django.utils import timezone

from bench import admin
from bench.stats import median, timed_ms
from durableflow.conf import df_settings
from durableflow.models import Execution

WORKFLOWS = [f"wf-{n:02d}" for n in range(20)]
PAGE = 50


def _finished(now, rng: random.Random, status: str | None = None, workflow: str | None = None) -> Execution:
    status = status or rng.choices(["completed", "failed", "cancelled"], [95, 4, 1])[0]
    created = now - timedelta(seconds=rng.uniform(60, 30 * 86400))
    return Execution(
        id=uuid.uuid4().hex,
        workflow=workflow or rng.choice(WORKFLOWS),
        status=status,
        params={},
        queue="q",
        root_id="r",
        created_at=created,
        enqueued_at=created,
        finished_at=created,
        deliveries=1,
        result={"ok": True} if status == "completed" else None,
    )


def _live(now, rng: random.Random) -> list[Execution]:
    """The unfinished executions: the same few hundred whatever the history's size."""
    rows = []

    def add(count, enqueued_at=None, **fields):
        for _ in range(count):
            created = now - timedelta(seconds=rng.uniform(0, 3600))
            rows.append(
                Execution(
                    id=uuid.uuid4().hex,
                    workflow=rng.choice(WORKFLOWS),
                    params={},
                    queue="q",
                    root_id="r",
                    created_at=created,
                    enqueued_at=enqueued_at or created,
                    **fields,
                )
            )

    for _ in range(100):
        add(1, status="waiting", wake_at=now + timedelta(seconds=rng.uniform(60, 86400)))
    for _ in range(20):
        add(1, status="waiting", wake_at=now - timedelta(seconds=rng.uniform(0, 1)))
    add(20, status="pending", enqueued_at=now - timedelta(seconds=600))
    add(20, status="pending")
    add(40, status="running", lease_token="x" * 32, lease_expires_at=now + timedelta(seconds=60))
    return rows


def grow(total: int, seed: int = 7) -> None:
    """Fill the table up to ``total`` rows (the live ones first)."""
    rng = random.Random(seed + total)
    now = timezone.now()
    if not Execution.objects.exists():
        # A full page for every filtered list even in the smallest history, so that each size
        # times the same 50 rows' worth of fetching (1,000 random rows hold ~32 failed ones).
        full_pages = [_finished(now, rng, "failed") for _ in range(PAGE)]
        full_pages += [_finished(now, rng, "completed", "wf-07") for _ in range(PAGE)]
        Execution.objects.bulk_create(_live(now, rng) + full_pages)
    missing = total - Execution.objects.count()
    while missing > 0:
        chunk = min(missing, 20_000)
        Execution.objects.bulk_create([_finished(now, rng) for _ in range(chunk)], batch_size=5_000)
        missing -= chunk
    with connection.cursor() as cursor:
        # PostgreSQL: VACUUM too, so that autovacuum does not start on the new rows mid-measurement.
        cursor.execute("VACUUM ANALYZE durableflow_execution" if connection.vendor == "postgresql" else "ANALYZE")


def queries() -> dict[str, Callable[[], Any]]:
    from bench import api

    batch = int(df_settings.SWEEP_BATCH_SIZE)
    return {
        # The REST API's list, whole requests: first page, and key set pages half-way down.
        **api.page_queries(),
        # What the admin changelist and the API list run for a page (ordering of the model).
        "list_latest": lambda: list(Execution.objects.all()[:PAGE]),
        "list_status_workflow": lambda: list(Execution.objects.filter(status="completed", workflow="wf-07")[:PAGE]),
        "list_status": lambda: list(Execution.objects.filter(status="failed")[:PAGE]),
        # The sweep's two questions, as operations.sweep asks them.
        "sweep_due": lambda: list(Execution.objects.due().order_by("wake_at").values_list("id", "queue")[:batch]),
        "sweep_stale": lambda: list(
            Execution.objects.stale(df_settings.LEASE_SECONDS)
            .order_by("enqueued_at")
            .values_list("id", "queue")[:batch]
        ),
    }


def _plan(query: Callable[[], Any]) -> str:
    from django.test.utils import CaptureQueriesContext

    with CaptureQueriesContext(connection) as captured:
        query()
    sql = captured.captured_queries[-1]["sql"]
    explain = "EXPLAIN " if connection.vendor == "postgresql" else "EXPLAIN QUERY PLAN "
    with connection.cursor() as cursor:
        cursor.execute(explain + sql)
        return "\n".join(" ".join(str(part) for part in row) for row in cursor.fetchall())


def measure(sizes: list[int], repeats: int) -> dict[str, Any]:
    out: dict[str, Any] = {"sizes": {}, "plans": {}}
    for size in sizes:
        grow(size)
        timings, returned = {}, {}
        # The admin's pages, whole requests, beside the raw queries (bench/admin.py).
        for name, query in {**queries(), **admin.pages()}.items():
            returned[name] = len(query())
            timings[name] = median(timed_ms(query) for _ in range(repeats))
        out["sizes"][str(size)] = {"rows": Execution.objects.count(), "ms": timings, "returned": returned}
    out["plans"] = {name: _plan(query) for name, query in queries().items()}
    from bench import api

    # The REST journal's last page against its first, on a journal as long as the bench allows.
    out["journal"] = api.journal_pages(min(10_000, max(sizes)), repeats)
    return out
