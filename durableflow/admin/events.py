"""Events (published events, signals, token completions) and an execution's waits (read-only).

Events are published through their verbs (``durableflow.send_event``, ``signal``,
``complete_token``, the execution page's actions), which satisfy the waits; a row written
here would satisfy nothing, so the pages only read.
"""

from __future__ import annotations

from django.contrib import admin

from durableflow.admin import display
from durableflow.admin.base import RecordAdmin
from durableflow.models import Event, Waiter

__all__ = ["EventAdmin", "waits_panel", "WAITS_ROWS"]

WAITS_ROWS = 50


@admin.register(Event)
class EventAdmin(RecordAdmin):
    """Published events, signals and token completions, newest first."""

    list_display = ("id", "kind", "name", "event_id", "execution_id", "created_at")
    list_filter = ("kind",)
    search_fields = ("name__exact", "event_id__exact", "execution__id__exact")
    search_help_text = "An exact event type, signal name or token, event id, or execution id."
    list_select_related = False
    sortable_by = ("id",)
    fields = ("kind", "name", "event_id", "execution_id", "created_at", "payload_json")

    @admin.display(description="payload")
    def payload_json(self, event):
        return display.pretty_json(event.payload)


def waits_panel(model_admin, request, execution):
    """The execution's waits, latest first: what each waited for, until when, and how it ended."""
    rows = list(
        Waiter.objects.filter(execution_id=execution.pk).select_related("event").order_by("-id")[: WAITS_ROWS + 1]
    )
    if not rows:
        return None
    return {
        "waits": [
            {
                "waiter": waiter,
                "status": display.status_badge(waiter.status),
                "match": display.pretty_json(waiter.match) if waiter.match is not None else "",
                "deadline": display.when(waiter.deadline_at),
                "payload": display.pretty_json(waiter.event.payload) if waiter.event is not None else "",
            }
            for waiter in rows[:WAITS_ROWS]
        ],
        "cut": len(rows) > WAITS_ROWS,
        "limit": WAITS_ROWS,
    }
