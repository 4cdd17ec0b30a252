"""Admin: executions with their journal and waits; cancel and retry actions; published events."""

from __future__ import annotations

import json

from django.contrib import admin, messages
from django.utils.html import format_html
from django.utils.translation import ngettext

from durableflow import exceptions, operations
from durableflow.models import Event, Execution, StepRecord, Waiter


def _pretty(value) -> str:
    return format_html("<pre>{}</pre>", json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False))


class StepRecordInline(admin.TabularInline):
    model = StepRecord
    fields = ("key", "kind", "status", "attempts", "started_at", "finished_at", "pretty_value", "error_message")
    readonly_fields = fields
    extra = 0
    can_delete = False
    show_change_link = False

    def has_add_permission(self, request, obj=None):
        return False

    @admin.display(description="value")
    def pretty_value(self, record):
        return _pretty(record.value)

    @admin.display(description="error")
    def error_message(self, record):
        return (record.error or {}).get("message", "")


class WaiterInline(admin.TabularInline):
    model = Waiter
    fields = ("key", "kind", "target", "match", "status", "created_at", "deadline_at", "resolved_at", "event")
    readonly_fields = fields
    extra = 0
    can_delete = False
    show_change_link = False
    verbose_name_plural = "waits"

    def has_add_permission(self, request, obj=None):
        return False


@admin.register(Event)
class EventAdmin(admin.ModelAdmin):
    """Published events, signals and token completions (read only: publish through the API)."""

    list_display = ("id", "kind", "name", "event_id", "execution", "created_at")
    list_filter = ("kind",)
    search_fields = ("=name", "=event_id", "=execution__id")
    show_full_result_count = False
    list_per_page = 50
    fields = ("kind", "name", "event_id", "execution", "created_at", "pretty_payload")
    readonly_fields = fields

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    @admin.display(description="payload")
    def pretty_payload(self, event):
        return _pretty(event.payload)


@admin.register(Execution)
class ExecutionAdmin(admin.ModelAdmin):
    list_display = ("id", "workflow", "status", "created_at", "finished_at", "deliveries")
    list_filter = ("status", "workflow")
    search_fields = ("=id", "=idempotency_key")
    date_hierarchy = "created_at"
    show_full_result_count = False
    list_per_page = 50
    inlines = [StepRecordInline, WaiterInline]
    actions = ["cancel_executions", "retry_executions"]
    fields = (
        "id",
        "workflow",
        "version",
        "status",
        "queue",
        "idempotency_key",
        "parent",
        "root_id",
        "created_at",
        "started_at",
        "finished_at",
        "waiting_for",
        "wake_at",
        "deliveries",
        "pretty_params",
        "pretty_result",
        "pretty_error",
    )
    readonly_fields = fields

    def has_add_permission(self, request):
        return False

    @admin.display(description="params")
    def pretty_params(self, execution):
        return _pretty(execution.params)

    @admin.display(description="result")
    def pretty_result(self, execution):
        return _pretty(execution.result)

    @admin.display(description="error")
    def pretty_error(self, execution):
        return _pretty(execution.error)

    @admin.action(description="Cancel selected executions", permissions=["change"])
    def cancel_executions(self, request, queryset):
        self._apply(request, queryset, operations.cancel, "cancelled")

    @admin.action(description="Retry selected failed executions", permissions=["change"])
    def retry_executions(self, request, queryset):
        self._apply(request, queryset, operations.retry, "retried")

    def _apply(self, request, queryset, verb, done):
        count = 0
        for execution_id in queryset.values_list("id", flat=True):
            try:
                verb(execution_id)
                count += 1
            except exceptions.InvalidTransition as exc:
                self.message_user(request, exc.message, messages.WARNING)
        self.message_user(
            request,
            ngettext("%(count)d execution %(done)s.", "%(count)d executions %(done)s.", count)
            % {"count": count, "done": done},
            messages.SUCCESS,
        )
