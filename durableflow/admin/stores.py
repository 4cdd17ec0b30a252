"""Stores: their state, waiters and the history of the steps that changed them (read-only).

A store changes through its verbs (``durableflow.stores.update``), which wake its waiters;
an edit here would not, so the page only reads.
"""

from __future__ import annotations

import json

from django.contrib import admin
from django.utils.html import format_html, format_html_join

from durableflow.admin.base import RecordAdmin
from durableflow.admin.display import pretty_json
from durableflow.models import Store, StoreLedger, StoreWaiter
from durableflow.orm import db_alias


@admin.register(Store)
class StoreAdmin(RecordAdmin):
    """Read-only: a store changes through its verbs (``durableflow.stores.update``), which wake
    its waiters; an edit here would not."""

    list_display = ("name", "store_id", "version", "updated_at")
    list_filter = ("name",)
    search_fields = ("=store_id",)
    _shown = ("name", "store_id", "version", "instance_id", "created_at", "updated_at", "pretty_state")
    readonly_fields = (*_shown, "waiters", "history")
    fieldsets = (
        (None, {"fields": _shown}),
        ("Waiters", {"fields": ("waiters",)}),
        ("History", {"fields": ("history",)}),
    )

    @admin.display(description="state")
    def pretty_state(self, store):
        return pretty_json(store.state, collapse=False)

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
