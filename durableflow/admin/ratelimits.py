"""Rate limits: the admissions each limiter counted, and the requests still waiting (read-only).

Admissions are written by the limiter only (``ctx.step.run(rate_limit=)``): a row deleted here
would give its key a unit it has spent, and one added would take a unit nobody asked for, so
the pages only read. The prune deletes admissions once they have left their window.
"""

from __future__ import annotations

from django.contrib import admin

from durableflow.admin.base import RecordAdmin
from durableflow.models import RateLimitAdmission

__all__ = ["RateLimitAdmissionAdmin"]


@admin.register(RateLimitAdmission)
class RateLimitAdmissionAdmin(RecordAdmin):
    """A key's admissions, newest first: when each step asked, when it was admitted, for how much."""

    list_display = ("id", "key", "execution_id", "step_key", "units", "requested_at", "admitted_at", "expires_at")
    list_filter = (("admitted_at", admin.EmptyFieldListFilter),)
    search_fields = ("=key", "=execution__id")
    search_help_text = "An exact rate limit key or execution id."
    list_select_related = False
    sortable_by = ("id",)
    fields = ("key", "execution_id", "step_key", "units", "requested_at", "admitted_at", "expires_at")
