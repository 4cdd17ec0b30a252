"""Admin: executions with their journal and waits; cancel and retry actions; stores with their
waiters and the history of the steps that changed them; effects and published events (read-only)."""

from __future__ import annotations

import json

from django.contrib import admin, messages
from django.utils.html import format_html, format_html_join
from django.utils.translation import ngettext

from durableflow import exceptions, operations
from durableflow.models import Effect, Event, Execution, StepRecord, Store, StoreLedger, StoreWaiter, Waiter
from durableflow.orm import db_alias


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


@admin.register(Store)
class StoreAdmin(admin.ModelAdmin):
    """Read-only: a store changes through its verbs (``durableflow.stores.update``), which wake
    its waiters; an edit here would not."""

    list_display = ("name", "store_id", "version", "updated_at")
    list_filter = ("name",)
    search_fields = ("=store_id",)
    show_full_result_count = False
    _shown = ("name", "store_id", "version", "instance_id", "created_at", "updated_at", "pretty_state")
    readonly_fields = (*_shown, "waiters", "history")
    fieldsets = (
        (None, {"fields": _shown}),
        ("Waiters", {"fields": ("waiters",)}),
        ("History", {"fields": ("history",)}),
    )

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    @admin.display(description="state")
    def pretty_state(self, store):
        return _pretty(store.state)

    @admin.display(description="waiting executions")
    def waiters(self, store):
        rows = StoreWaiter.objects.using(db_alias()).filter(name=store.name, store_id=store.store_id)
        return _table(
            ("execution", "step", "seen at version", "reads", "woken"),
            [
                (w.execution_id, w.key, w.version, json.dumps(w.reads), w.woken_at or "")
                for w in rows.order_by("id")[:100]
            ],
        )

    @admin.display(description="applied steps (latest 50)")
    def history(self, store):
        rows = StoreLedger.objects.using(db_alias()).filter(name=store.name, store_id=store.store_id)
        return _table(
            ("version", "execution", "step", "kind", "applied"),
            [(e.version, e.execution_id, e.key, e.kind, e.applied_at) for e in rows.order_by("-id")[:50]],
        )


def _table(headers, rows) -> str:
    if not rows:
        return "-"
    head = format_html_join("", "<th>{}</th>", ((h,) for h in headers))
    cells = ((format_html_join("", "<td>{}</td>", ((cell,) for cell in row)),) for row in rows)
    body = format_html_join("", "<tr>{}</tr>", cells)
    return format_html("<table><thead><tr>{}</tr></thead><tbody>{}</tbody></table>", head, body)


@admin.register(Effect)
class EffectAdmin(admin.ModelAdmin):
    """Effects are written by the protocol only: here they are read (status, result, who began it)."""

    list_display = ("id", "operation", "status", "attempts", "began_by", "created_at", "settled_at")
    list_filter = ("status", "operation")
    search_fields = ("=id", "=began_by")
    date_hierarchy = "created_at"
    show_full_result_count = False
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

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        # A deleted effect would be performed again by the next execution that names it.
        return False

    @admin.display(description="input")
    def pretty_input(self, effect):
        return _pretty(effect.input)

    @admin.display(description="result")
    def pretty_result(self, effect):
        return _pretty(effect.result)
