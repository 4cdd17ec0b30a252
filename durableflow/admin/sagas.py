"""What the execution page shows of a saga: the compensation report, and its reruns and forks."""

from __future__ import annotations

from datetime import timedelta

from durableflow.admin import display
from durableflow.models import Execution

__all__ = ["compensations_panel", "lineage_panel", "LINEAGE_ROWS"]

LINEAGE_ROWS = 20


def compensations_panel(model_admin, request, execution):
    """The compensations that ran, in order (last-completed step first): status, error, duration."""
    report = execution.compensations
    if not report:
        return None
    rows = []
    for entry in report:
        duration = entry.get("duration")
        rows.append(
            {
                "step": entry.get("step"),
                "status": display.status_badge(entry.get("status") or ""),
                "error": display.error_block(entry.get("error")),
                "duration": display.duration_text(timedelta(seconds=duration)) if duration is not None else "",
                "started": display.when(entry.get("started_at")),
            }
        )
    return {"rows": rows}


def lineage_panel(model_admin, request, execution):
    """The executions rerun or forked from this one (read off the origin index)."""
    made = list(
        Execution.objects.filter(origin_id=execution.pk)
        .only("id", "workflow", "status", "origin_kind", "origin_step", "created_at")
        .order_by("-created_at", "-id")[: LINEAGE_ROWS + 1]
    )
    if not made:
        return None
    return {
        "rows": [
            (model_admin.record_url(other), other, display.status_badge(other.status)) for other in made[:LINEAGE_ROWS]
        ],
        "cut": len(made) > LINEAGE_ROWS,
        "limit": LINEAGE_ROWS,
    }
