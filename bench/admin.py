"""The admin's pages on a large history: whole requests, as an operator's browser makes them.

``pages()`` returns callables that each GET one admin page through Django's test client as a
superuser (session, permissions, the queries, template rendering: everything but the network)
and return its body. ``bench.listing.measure`` times them beside the raw page queries at each
history size, so the report shows each page's time on the small and the large history and
their ratio (a page that stays flat as the table grows reads an index, never the table).
"""

from __future__ import annotations

from datetime import timedelta
from typing import Callable

from django.contrib.auth import get_user_model
from django.test import Client
from django.urls import reverse

from durableflow.models import Execution, StepRecord

__all__ = ["pages", "JOURNAL_STEPS"]

JOURNAL_STEPS = 200


def pages() -> dict[str, Callable[[], bytes]]:
    client = _operator()
    changelist = reverse("admin:durableflow_execution_changelist")
    execution = _with_journal()
    page = reverse("admin:durableflow_execution_change", args=[execution])

    def get(url: str) -> Callable[[], bytes]:
        def fetch() -> bytes:
            response = client.get(url)
            assert response.status_code == 200, (url, response.status_code)
            return response.content

        return fetch

    return {
        "admin_changelist": get(changelist),
        "admin_changelist_failed": get(f"{changelist}?status__exact=failed"),
        "admin_changelist_workflow": get(f"{changelist}?workflow=wf-07&status__exact=completed"),
        "admin_execution_page": get(page),
    }


def _operator() -> Client:
    user, _ = get_user_model().objects.get_or_create(
        username="bench-admin", defaults={"is_staff": True, "is_superuser": True}
    )
    client = Client(HTTP_HOST="localhost")
    client.force_login(user)
    return client


def _with_journal() -> str:
    """A finished execution with a journal of ``JOURNAL_STEPS`` steps (made once)."""
    execution = Execution.objects.filter(status="failed").order_by("id").first()
    if not StepRecord.objects.filter(execution_id=execution.pk).exists():
        start = execution.created_at
        StepRecord.objects.bulk_create(
            StepRecord(
                execution_id=execution.pk,
                key=f"step-{n}",
                kind="run",
                status="completed",
                attempts=1,
                value={"n": n, "items": list(range(n % 20))},
                started_at=start + timedelta(milliseconds=40 * n),
                finished_at=start + timedelta(milliseconds=40 * n + 25),
            )
            for n in range(JOURNAL_STEPS)
        )
    return execution.pk
