"""Effects: status, attempts, who began it, input and result (read-only).

Effects are written by the protocol only; a deleted effect would be performed again by the
next execution that names it, so nothing here deletes one.
"""

from __future__ import annotations

from django.contrib import admin

from durableflow.admin.base import RecordAdmin
from durableflow.admin.display import pretty_json
from durableflow.models import Effect


@admin.register(Effect)
class EffectAdmin(RecordAdmin):
    """Effects are written by the protocol only: here they are read (status, result, who began it)."""

    list_display = ("id", "operation", "status", "attempts", "began_by", "created_at", "settled_at")
    list_filter = ("status", "operation")
    search_fields = ("=id", "=began_by")
    date_hierarchy = "created_at"
    list_per_page = 50
    fields = (
        "id",
        "operation",
        "status",
        "attempts",
        "began_by",
        "began_step",
        "settled_by",
        "holder_id",
        "created_at",
        "updated_at",
        "settled_at",
        "pretty_input",
        "pretty_result",
    )
    readonly_fields = fields

    @admin.display(description="input")
    def pretty_input(self, effect):
        return pretty_json(effect.input)

    @admin.display(description="result")
    def pretty_result(self, effect):
        return pretty_json(effect.result)
