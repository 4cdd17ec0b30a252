"""Executions: the list, the page with its journal timeline, and the steering actions.

The list reads one page off an index whatever the table's size: filters that need no query
(statuses from the model, workflows from the registry), exact-match search on indexed
columns, an estimated count, a date hierarchy from MIN/MAX, and no per-row query (the heavy
JSON columns are deferred; a failed run's message is read by the page's one query).
"""

from __future__ import annotations

from django.contrib import admin
from django.contrib.admin.utils import quote
from django.contrib.admin.views.main import ChangeList
from django.db.models.fields.json import KT
from django.urls import reverse
from django.utils import timezone
from django.utils.html import format_html
from django.utils.http import urlencode
from django.utils.safestring import mark_safe

from durableflow.admin import display
from durableflow.admin.actions import Action
from durableflow.admin.base import Panel, RecordAdmin
from durableflow.admin.events import waits_panel
from durableflow.admin.forms import ForkForm, ReasonForm, SignalForm, TokenForm
from durableflow.admin.sagas import compensations_panel, lineage_panel
from durableflow.admin.streams import StreamsAdminMixin, streams_panel
from durableflow.admin.timeline import build as build_timeline
from durableflow.engine.states import ExecutionStatus, StepStatus
from durableflow.engine.steering import is_stalled
from durableflow.models import Execution, StepRecord, WorkflowDocument
from durableflow.orm import db_alias
from durableflow.registry import registry as code_registry

__all__ = ["ExecutionAdmin", "WorkflowFilter", "VersionFilter", "STEERING"]

S = ExecutionStatus
# The list never loads these (params, results and errors may be a megabyte each).
HEAVY = ("params", "result", "error", "metadata")
JOURNAL_ROWS = 500
CHILDREN_ROWS = 20


# Actions ---------------------------------------------------------------------------------------


def _retryable(execution) -> bool:
    return execution.status == S.FAILED or is_stalled(execution)


def _waits_for_token(execution) -> bool:
    return execution.status == S.WAITING and (execution.waiting_for or {}).get("kind") == "token"


STEERING = (
    Action(
        name="cancel",
        label="Cancel",
        verb_name="cancel",
        call=lambda verb, execution, data: verb(execution.pk, data.get("reason") or None),
        explanation=(
            "The execution stops for good: a waiting run never wakes, and a running delivery is "
            "fenced out, so nothing it does after this is recorded (a step body already running "
            "may still finish). A run with compensations is delivered once more to run them, "
            "last-completed step first, and then ends cancelled."
        ),
        past="cancelled",
        form=ReasonForm,
        applies=lambda execution: not execution.is_finished,
        bulk=True,
        dangerous=True,
    ),
    Action(
        name="retry",
        label="Retry",
        verb_name="retry",
        call=lambda verb, execution, data: verb(execution.pk),
        explanation=(
            "The run resumes from the step that failed it: completed steps replay their recorded "
            "values, and the failed step gets a fresh set of attempts."
        ),
        past="retried",
        applies=_retryable,
        bulk=True,
    ),
    Action(
        name="rerun",
        label="Rerun",
        verb_name="rerun",
        call=lambda verb, execution, data: verb(execution.pk),
        explanation="A new execution of the same workflow starts with the same params; this one stays as it is.",
        past="rerun as a new execution",
        permission="start",
        applies=lambda execution: execution.is_finished,
        follow=lambda new: new,
    ),
    Action(
        name="fork",
        label="Fork",
        verb_name="fork",
        call=lambda verb, execution, data: verb(execution.pk, from_step=data["from_step"]),
        explanation=(
            "A new execution starts with this one's journal before the chosen step, and runs that "
            "step and what follows again; this one stays as it is."
        ),
        past="forked",
        form=ForkForm,
        permission="start",
        applies=lambda execution: execution.is_finished,
        follow=lambda new: new,
    ),
    Action(
        name="signal",
        label="Send signal",
        verb_name="signal",
        call=lambda verb, execution, data: verb(execution.pk, data["name"], data["payload"]),
        explanation="The signal is delivered to the execution's wait for it, or buffered until it waits.",
        past="signalled",
        form=SignalForm,
        applies=lambda execution: not execution.is_finished,
    ),
    Action(
        name="complete-token",
        label="Complete token",
        verb_name="complete_token",
        call=lambda verb, execution, data: verb(data["token"], data["payload"]),
        explanation="The wait for this token ends and returns the payload to the workflow.",
        past="had its token completed",
        form=TokenForm,
        applies=_waits_for_token,
    ),
)


# The list --------------------------------------------------------------------------------------


class WorkflowFilter(admin.SimpleListFilter):
    """Workflows from the registry (code and documents): no ``SELECT DISTINCT workflow`` over the table."""

    title = "workflow"
    parameter_name = "workflow"

    def lookups(self, request, model_admin):
        # Code workflows, and documents by name (one query on the documents' small table).
        names = {definition.name for definition in code_registry.all()}  # every version: VersionFilter
        names.update(WorkflowDocument.objects.using(db_alias()).values_list("name", flat=True).distinct())
        return [(name, name) for name in sorted(names)]

    def queryset(self, request, queryset):
        return queryset.filter(workflow=self.value()) if self.value() else queryset


class VersionFilter(admin.SimpleListFilter):
    """The registered versions of the chosen code workflow (side by side, each with its own runs)."""

    title = "version"
    parameter_name = "version"

    def lookups(self, request, model_admin):
        name = request.GET.get(WorkflowFilter.parameter_name)
        if not name or not code_registry.is_code(name):
            return []
        current = code_registry.get(name)
        return [
            (d.version, f"{d.version} (new runs)" if d is current else d.version) for d in code_registry.versions(name)
        ]

    def queryset(self, request, queryset):
        return queryset.filter(version=self.value()) if self.value() else queryset


class ExecutionChangeList(ChangeList):
    def get_queryset(self, request, exclude_parameters=None):
        queryset = super().get_queryset(request, exclude_parameters)
        return queryset.defer(*HEAVY).annotate(error_message=KT("error__message"))


# Panels of the execution page ----------------------------------------------------------------------


def journal_panel(model_admin, request, execution):
    records = list(StepRecord.objects.filter(execution_id=execution.pk).order_by("id")[: JOURNAL_ROWS + 1])
    cut = len(records) > JOURNAL_ROWS
    records = records[:JOURNAL_ROWS]
    timeline = build_timeline(
        records,
        started=execution.started_at or execution.created_at,
        finished=execution.finished_at,
        now=timezone.now(),
    )
    fork = model_admin.find_action("fork")
    fork_url = (
        model_admin.action_url(execution, fork) if model_admin.action_permitted(request, fork, execution) else None
    )
    rows = [
        {
            "row": row,
            "status": display.status_badge(row.record.status),
            "value": display.pretty_json(row.record.value)
            if row.record.status == StepStatus.COMPLETED and row.record.value is not None
            else "",
            "error": display.error_block(row.record.error),
        }
        for row in timeline.rows
    ]
    return {"timeline": timeline, "rows": rows, "cut": cut, "limit": JOURNAL_ROWS, "fork_url": fork_url}


def children_panel(model_admin, request, execution):
    # Not ``execution.children``: the related manager reads each child's (deferred) parent_id.
    rows = Execution.objects.filter(parent_id=execution.pk).only("id", "workflow", "status", "created_at")
    children = list(rows[: CHILDREN_ROWS + 1])
    if not children:
        return None
    changelist = reverse("admin:durableflow_execution_changelist", current_app=model_admin.admin_site.name)
    return {
        "children": [(model_admin.record_url(c), c, display.status_badge(c.status)) for c in children[:CHILDREN_ROWS]],
        "more_url": f"{changelist}?{urlencode({'parent__exact': execution.pk})}"
        if len(children) > CHILDREN_ROWS
        else None,
    }


# The admin ------------------------------------------------------------------------------------------


@admin.register(Execution)
class ExecutionAdmin(StreamsAdminMixin, RecordAdmin):
    list_display = ("id", "workflow", "status_badge", "doing", "created", "took")
    list_filter = ("status", WorkflowFilter, VersionFilter)
    search_fields = ("id__exact", "idempotency_key__exact", "workflow__exact")
    search_help_text = "An exact execution id, idempotency key or workflow name."
    date_hierarchy = "created_at"
    # No column reads a related row (the parent is a link by id): nothing to join.
    list_select_related = False
    # Sorting by another column would sort the whole table: these two are read off indexes.
    sortable_by = ("id", "created")
    steering = STEERING
    panels = (
        Panel("Journal", "admin/durableflow/execution/panel_journal.html", journal_panel, after_summary=True),
        Panel("Streams", "admin/durableflow/execution/panel_streams.html", streams_panel),
        Panel("Waits", "admin/durableflow/execution/panel_waits.html", waits_panel),
        Panel("Compensations", "admin/durableflow/execution/panel_compensations.html", compensations_panel),
        Panel("Children", "admin/durableflow/execution/panel_children.html", children_panel),
        Panel("Reruns and forks", "admin/durableflow/execution/panel_lineage.html", lineage_panel),
    )

    def get_fieldsets(self, request, obj=None):
        """The summary, then the data the run has (an empty result or error is not shown)."""
        summary = ["id", "workflow_version", "status_badge", "doing", "timing", "queue"]
        data = ["params_json", "result_json", "error_html", "metadata_json", "waiting_for_json"]
        if obj is not None:
            summary += [name for name, shown in (("idempotency_key", obj.idempotency_key),) if shown]
            summary += [
                name
                for name, shown in (
                    ("parent_link", obj.parent_id),
                    ("root_link", obj.root_id != obj.pk),
                    ("origin_link", obj.origin_id),
                    ("deadline", obj.deadline_at),
                    ("concurrency", obj.concurrency_key is not None),
                    ("cancel_requested_text", obj.cancel_requested and not obj.is_finished),
                )
                if shown
            ]
            present = {
                "params_json": True,
                "result_json": obj.status == S.COMPLETED,
                "error_html": obj.error,
                "metadata_json": obj.metadata,
                # A claimed run keeps its last wait's record; it is stale once it runs again.
                "waiting_for_json": obj.waiting_for and (obj.status == S.WAITING or obj.concurrency_ticket is not None),
            }
            data = [name for name in data if present[name]]
        else:
            summary += ["idempotency_key", "parent_link", "root_link", "origin_link"]
        return ((None, {"fields": summary}), ("Data", {"fields": data}))

    def get_changelist(self, request, **kwargs):
        return ExecutionChangeList

    def has_start_permission(self, request, obj=None) -> bool:
        """Rerun and fork start a new execution: the add permission."""
        return request.user.has_perm(f"{self.opts.app_label}.add_{self.opts.model_name}")

    def confirmation_row(self, execution):
        return format_html(
            "{} <code>{}</code> {}", execution.workflow, execution.pk, display.status_badge(execution.status)
        )

    # Columns and fields ------------------------------------------------------------------

    @admin.display(description="status", ordering="status")
    def status_badge(self, execution):
        return display.status_badge(execution.status)

    @admin.display(description="now")
    def doing(self, execution):
        """What the run does or did: its wait, its lease, its error."""
        if execution.status == S.WAITING:
            text = display.waiting_text(execution.waiting_for, execution.wake_at)
            return text or "waiting"
        if execution.status == S.RUNNING:
            return format_html(
                "delivery {} · lease until {}", execution.deliveries, display.when(execution.lease_expires_at)
            )
        if execution.status == S.PENDING:
            return format_html("queued {}", display.when(execution.enqueued_at))
        message = getattr(execution, "error_message", None)
        if message is None and "error" not in execution.get_deferred_fields():
            message = (execution.error or {}).get("message")
        return message[:200] if message else ""

    @admin.display(description="created", ordering="created_at")
    def created(self, execution):
        return display.when(execution.created_at)

    @admin.display(description="took")
    def took(self, execution):
        if execution.started_at and execution.finished_at:
            return display.duration_text(execution.finished_at - execution.started_at)
        return ""

    @admin.display(description="timing")
    def timing(self, execution):
        parts = [format_html("created {}", display.when(execution.created_at))]
        if execution.started_at:
            parts.append(format_html("started {}", display.when(execution.started_at)))
        if execution.finished_at:
            parts.append(format_html("finished {}", display.when(execution.finished_at)))
            parts.append(format_html("took {}", self.took(execution)))
        deliveries = execution.deliveries
        parts.append(format_html("{} deliver{}", deliveries, "y" if deliveries == 1 else "ies"))
        return mark_safe(" · ".join(str(part) for part in parts))

    @admin.display(description="workflow")
    def workflow_version(self, execution):
        return format_html("{} <span class='df-quiet'>version {}</span>", execution.workflow, execution.version)

    @admin.display(description="parent")
    def parent_link(self, execution):
        return self._link(execution.parent_id)

    @admin.display(description="made from")
    def origin_link(self, execution):
        if not execution.origin_id:
            return "—"
        step = format_html(" from step <code>{}</code>", execution.origin_step) if execution.origin_step else ""
        return format_html("{} of {}{}", execution.origin_kind, self._link(execution.origin_id), step)

    @admin.display(description="deadline")
    def deadline(self, execution):
        """When the sweep cancels the run if it is still unfinished (DEADLINE_EXCEEDED)."""
        if execution.deadline_at is None:
            return "—"
        if execution.is_finished:
            return display.when(execution.deadline_at)
        return format_html("{}: cancelled then if still unfinished", display.when(execution.deadline_at))

    @admin.display(description="concurrency key")
    def concurrency(self, execution):
        """The run's concurrency key, and whether it holds one of the key's slots or waits for one."""
        if execution.concurrency_key is None:
            return "—"
        key = format_html("<code>{}</code>", execution.concurrency_key)
        if execution.concurrency_ticket is not None:
            position = (execution.waiting_for or {}).get("position")
            return format_html("{}: waiting for a slot (queued at position {})", key, position)
        if execution.is_finished:
            return key
        return format_html("{}: holds a slot", key)

    @admin.display(description="cancelling")
    def cancel_requested_text(self, execution):
        reason = (execution.cancel_requested or {}).get("message", "")
        return f"cancel requested ({reason}): its compensations run, then it ends cancelled"

    @admin.display(description="root")
    def root_link(self, execution):
        return self._link(execution.root_id) if execution.root_id != execution.pk else "—"

    def _link(self, execution_id):
        if not execution_id:
            return "—"
        url = reverse(
            "admin:durableflow_execution_change", args=[quote(execution_id)], current_app=self.admin_site.name
        )
        return format_html('<a href="{}"><code>{}</code></a>', url, execution_id)

    @admin.display(description="params")
    def params_json(self, execution):
        return display.pretty_json(execution.params)

    @admin.display(description="result")
    def result_json(self, execution):
        return display.pretty_json(execution.result) if execution.status == S.COMPLETED else "—"

    @admin.display(description="error")
    def error_html(self, execution):
        return display.error_block(execution.error) or "—"

    @admin.display(description="metadata")
    def metadata_json(self, execution):
        return display.pretty_json(execution.metadata) if execution.metadata else "—"

    @admin.display(description="waiting for")
    def waiting_for_json(self, execution):
        return display.pretty_json(execution.waiting_for) if execution.waiting_for else mark_safe("—")
