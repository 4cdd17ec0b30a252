"""The REST API's pages on a large history: a page deep in the list against the first page.

Plain functions over the project's database (``bench.listing`` fills it and calls them):
the whole request through the view (authentication forced, serialisation included), so the
number is what a client waits for minus the network. Key set pages should cost the same
wherever they start; an OFFSET page would grow with its position.
"""

from __future__ import annotations

from typing import Any, Callable

from bench.stats import median, timed_ms

PAGE = 50


def _request(path: str, **params: Any):
    from django.contrib.auth import get_user_model
    from rest_framework.test import APIRequestFactory, force_authenticate

    request = APIRequestFactory().get(path, params, HTTP_HOST="localhost")  # an allowed host of the demo
    force_authenticate(request, user=get_user_model()(username="bench", is_superuser=True, is_active=True))
    return request


def _view(**actions: str):
    """The viewset's view as the router builds it (an extra action brings its own initkwargs)."""
    from durableflow.api.executions import ExecutionViewSet

    (name,) = actions.values()
    extra = getattr(getattr(ExecutionViewSet, name), "kwargs", {}) if name not in ("list", "retrieve") else {}
    return ExecutionViewSet.as_view(actions, **extra)


def page_queries() -> dict[str, Callable[[], Any]]:
    """The executions list through the API: the first page, and one that starts half-way down."""
    from durableflow.api.pagination import ExecutionPagination
    from durableflow.models import Execution

    ordered = Execution.objects.order_by("-created_at", "-id")
    middle = ordered.values_list("pk", flat=True)[ordered.count() // 2]
    deep = ExecutionPagination().cursor_after(Execution.objects.all(), middle)
    view = _view(get="list")

    def page(**params: Any) -> Callable[[], Any]:
        def run() -> list:
            response = view(_request("/api/durableflow/executions/", page_size=PAGE, **params))
            assert response.status_code == 200, response.data
            return response.data["results"]

        return run

    return {
        "api_page_first": page(),
        "api_page_middle": page(cursor=deep),
        "api_page_middle_failed": page(status="failed", cursor=deep),
    }


def journal_pages(steps: int, repeats: int, page_size: int = 100) -> dict[str, Any]:
    """ms for the first and the last page of a ``steps``-long journal read through the API."""
    import uuid

    from durableflow.api.pagination import JournalPagination
    from durableflow.models import Execution, StepRecord

    execution = Execution.objects.create(id=uuid.uuid4().hex, workflow="bench", queue="q", root_id="r")
    StepRecord.objects.bulk_create(
        [StepRecord(execution=execution, key=f"s{i}", kind="run", status="completed", value=i) for i in range(steps)],
        batch_size=5_000,
    )
    last = StepRecord.objects.filter(execution=execution).order_by("-id").values_list("pk", flat=True)[page_size]
    cursor = JournalPagination().cursor_after(StepRecord.objects.all(), last)
    view, path = _view(get="journal"), f"/api/durableflow/executions/{execution.id}/journal/"

    def page(**params: Any) -> Callable[[], None]:
        return lambda: view(_request(path, page_size=page_size, **params), pk=execution.id)

    first = median(timed_ms(page()) for _ in range(repeats))
    final = median(timed_ms(page(cursor=cursor)) for _ in range(repeats))
    return {"steps": steps, "first_page_ms": first, "last_page_ms": final, "last_over_first": final / first}
