"""The base of every durableflow admin page: records you read, and steer only through actions.

Executions, journals, events, effects and the rest are records of what happened. The admin
shows them with the view permission and never edits them through a model form: there is no
Save button, a POST to the change form is refused (403), nothing is added, and nothing is
deleted (that is the prune command's job, which deletes a run with its journal). Changes
go through ``actions`` (``durableflow.admin.actions``), each a verb of
``durableflow.operations``.

A record's page is the change form (read-only) with ``panels`` below its fields: each panel
is a template and a context computed for the record, so a capability adds what it has to
show (waiters, a compensation report, stream chunks) as one more panel.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from django.contrib import admin
from django.contrib.admin.options import IncorrectLookupParameters
from django.utils import timezone

from durableflow import values
from durableflow.admin.actions import SteeringMixin
from durableflow.admin.paging import EstimatedCountPaginator

__all__ = ["Panel", "RecordAdmin"]


@dataclass(frozen=True)
class Panel:
    """A section of a record's page: ``template`` drawn with ``context(admin, request, obj)``
    (None or an empty dict hides it), right after the summary (the first fieldset) or at the
    end of the page."""

    title: str
    template: str
    context: Callable[[Any, Any, Any], dict[str, Any] | None]
    after_summary: bool = False


class RecordAdmin(SteeringMixin, admin.ModelAdmin):
    """Read-only pages over a large table, with steering actions and panels."""

    change_form_template = "admin/durableflow/record_change_form.html"
    change_list_template = "admin/durableflow/record_change_list.html"
    paginator = EstimatedCountPaginator
    # No COUNT(*) of the whole table ("N total") and no facet counts per filter choice.
    show_full_result_count = False
    show_facets = admin.ShowFacets.NEVER
    list_per_page = 50
    panels: tuple[Panel, ...] = ()

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        # False for everyone, superusers included: the page is read-only and a POST to it is
        # refused. Actions check their own permission (``has_steer_permission``).
        return False

    def has_delete_permission(self, request, obj=None):
        return False

    def get_object(self, request, object_id, from_field=None):
        # No row can have an id with a NUL (PostgreSQL refuses the query itself) or a lone
        # surrogate: the record does not exist, as for any other unknown id.
        if values.text_fault(str(object_id)) is not None:
            return None
        return super().get_object(request, object_id, from_field)

    def get_changelist_instance(self, request):
        # The same for a filter's or a search's value: Django's answer to a bad lookup.
        if any(values.text_fault(value) is not None for value in _query_values(request)):
            raise IncorrectLookupParameters("a query parameter holds a character no stored text can")
        return super().get_changelist_instance(request)

    def get_readonly_fields(self, request, obj=None):
        return [name for _, options in self.get_fieldsets(request, obj) for name in _flatten(options["fields"])]

    def render_change_form(self, request, context, add=False, change=False, form_url="", obj=None):
        if obj is not None:
            context["panels"] = self.panels_for(request, obj)
            context["steering_buttons"] = [(self.action_url(obj, a), a) for a in self.offered_actions(request, obj)]
        context["now"] = timezone.now()
        return super().render_change_form(request, context, add, change, form_url, obj)

    def panels_for(self, request, obj) -> list[tuple[Panel, dict[str, Any]]]:
        shown = []
        for panel in self.panels:
            context = panel.context(self, request, obj)
            if context:
                shown.append((panel, context))
        return shown


def _query_values(request):
    for key, given in request.GET.lists():
        yield key
        yield from given


def _flatten(fields):
    for name in fields:
        if isinstance(name, (list, tuple)):
            yield from name
        else:
            yield name
