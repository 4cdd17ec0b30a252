"""Actions operators trust: a verb behind a confirmation page, a permission and CSRF.

An ``Action`` names one ``durableflow.operations`` verb (the same the Python API and the REST
API call) and how to call it. ``SteeringMixin`` offers it twice:

- on a record's page, as a button (object tools) leading to
  ``<id>/do/<name>/``: GET shows the confirmation page (with the action's form: a reason, a
  JSON payload, a step), POST runs the verb and returns to the page with a message;
- in the changelist, as an admin action on the selected rows (``bulk=True``), whose
  confirmation page posts back to the changelist, as Django's "delete selected" does.

Nothing runs on GET. Each action that ran is written to the record's admin history (who, which
action, which inputs). Every POST goes through Django's CSRF check (``admin_view``) and the
action's permission (``has_<permission>_permission``); a user without it gets no button,
no admin action, and a 403 for a forged POST. The verb decides whether the action may happen
now (a cancel of a finished run raises ``InvalidTransition``): its message is shown, as is.
An action whose verb does not exist yet (an older or partial install) is not offered.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable

from django.contrib import messages
from django.contrib.admin import helpers
from django.contrib.admin.options import IS_POPUP_VAR
from django.contrib.admin.utils import quote, unquote
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import path, reverse
from django.utils.translation import ngettext

from durableflow import exceptions, operations
from durableflow.admin.forms import ActionForm

__all__ = ["Action", "SteeringMixin", "MAX_BULK"]

# A bulk action runs one verb per row in the request: beyond this, narrow the selection.
MAX_BULK = 1000


def _always(obj: Any) -> bool:
    return True

if TYPE_CHECKING:  # what SteeringMixin is mixed into
    from django.contrib.admin import ModelAdmin as _ModelAdmin
else:
    _ModelAdmin = object


@dataclass(frozen=True)
class Action:
    """One steering action. ``call(verb, obj, data)`` calls ``verb`` (the operations function
    named ``verb_name``) for ``obj`` with the form's cleaned data and returns what it returns."""

    name: str  # URL segment and admin action name: a slug
    label: str  # "Cancel"
    verb_name: str  # the durableflow.operations function it calls
    call: Callable[[Callable[..., Any], Any, dict[str, Any]], Any]
    explanation: str  # what happens, on the confirmation page
    past: str = "done"  # "cancelled": in "2 executions cancelled."
    form: type[ActionForm] = ActionForm
    permission: str = "steer"
    # Whether the button is offered on this record's page; the verb still decides.
    applies: Callable[[Any], bool] = _always
    bulk: bool = False
    dangerous: bool = False
    # The record to show after it ran (e.g. a rerun's new execution); None: the same record.
    follow: Callable[[Any], Any] | None = None

    @property
    def verb(self) -> Callable[..., Any] | None:
        return getattr(operations, self.verb_name, None)

    @property
    def admin_action_name(self) -> str:
        return f"steer_{self.name}"


class SteeringMixin(_ModelAdmin):
    """Adds ``steering`` actions to a ``ModelAdmin`` (see the module docstring)."""

    steering: tuple[Action, ...] = ()
    confirmation_template = "admin/durableflow/action_confirmation.html"

    # Permissions ----------------------------------------------------------------------------

    def has_steer_permission(self, request, obj=None) -> bool:
        """Steering a record takes the model's change permission, though no form edits it."""
        opts = self.opts
        return request.user.has_perm(f"{opts.app_label}.change_{opts.model_name}")

    def action_permitted(self, request, action: Action, obj=None) -> bool:
        return action.verb is not None and getattr(self, f"has_{action.permission}_permission")(request, obj)

    def offered_actions(self, request, obj) -> list[Action]:
        """The buttons on ``obj``'s page."""
        return [a for a in self.steering if self.action_permitted(request, a, obj) and a.applies(obj)]

    def find_action(self, name: str) -> Action | None:
        return next((a for a in self.steering if a.name == name), None)

    # URLs and the page action -------------------------------------------------------------------

    def get_urls(self):
        info = self.opts.app_label, self.opts.model_name
        view = self.admin_site.admin_view(self.action_view)
        return [path("<path:object_id>/do/<slug:name>/", view, name="%s_%s_action" % info), *super().get_urls()]

    def action_url(self, obj, action: Action) -> str:
        info = self.opts.app_label, self.opts.model_name
        return reverse(
            f"admin:{info[0]}_{info[1]}_action", args=[quote(obj.pk), action.name], current_app=self.admin_site.name
        )

    def record_url(self, obj) -> str:
        info = self.opts.app_label, self.opts.model_name
        return reverse(f"admin:{info[0]}_{info[1]}_change", args=[quote(obj.pk)], current_app=self.admin_site.name)

    def action_view(self, request, object_id, name):
        action = self.find_action(name)
        if action is None or action.verb is None:
            raise Http404(f"no action {name!r}")
        obj = self.get_object(request, unquote(object_id))
        if obj is None:
            raise Http404(f"no {self.opts.verbose_name} {unquote(object_id)!r}")
        if not self.has_view_permission(request, obj) or not self.action_permitted(request, action, obj):
            raise PermissionDenied
        data = request.POST if request.method == "POST" else None
        form = action.form(data, obj=obj, initial=request.GET.dict())
        if request.method == "POST" and form.is_valid():
            try:
                result = action.call(action.verb, obj, form.cleaned_data)
            except exceptions.DurableflowError as exc:
                self.message_user(request, f"{action.label} refused: {exc.message}", messages.ERROR)
                return HttpResponseRedirect(self.record_url(obj))
            self.log_steering(request, obj, action, form.cleaned_data)
            target = (action.follow(result) if action.follow else None) or obj
            done = f"{self.opts.verbose_name.capitalize()} {obj.pk} {action.past}"
            done += "." if target is obj else f": {target.pk}."
            self.message_user(request, done, messages.SUCCESS)
            return HttpResponseRedirect(self.record_url(target))
        return self.render_confirmation(request, action, form, [obj], obj=obj)

    # Bulk actions in the changelist --------------------------------------------------------------

    def get_actions(self, request):
        actions = super().get_actions(request)
        if self.actions is None or IS_POPUP_VAR in request.GET:
            return actions
        for action in self.steering:
            if action.bulk and self.action_permitted(request, action):
                name = action.admin_action_name
                actions[name] = (self.bulk_function(action), name, f"{action.label} selected %(verbose_name_plural)s")
        return actions

    def changelist_view(self, request, extra_context=None):
        # Django answers a POST naming an action the user may not run with "No action
        # selected."; a forged steering POST gets a plain 403 instead.
        if request.method == "POST":
            chosen = set(request.POST.getlist("action"))
            ours = {a.admin_action_name for a in self.steering}
            if chosen & (ours - set(self.get_actions(request))):
                raise PermissionDenied
        return super().changelist_view(request, extra_context)

    def bulk_function(self, action: Action):
        def run_bulk(modeladmin, request, queryset):
            return modeladmin.run_bulk(request, queryset, action)

        run_bulk.__name__ = action.admin_action_name
        return run_bulk

    def run_bulk(self, request, queryset, action: Action):
        verb = action.verb
        if verb is None:
            raise Http404(f"no action {action.name!r}")
        selected = list(queryset.order_by()[: MAX_BULK + 1])
        if len(selected) > MAX_BULK:
            self.message_user(
                request, f"{action.label}: select at most {MAX_BULK:,} {self.opts.verbose_name_plural}.", messages.ERROR
            )
            return None
        form = action.form(request.POST if request.POST.get("post") == "yes" else None)
        if not form.is_bound or not form.is_valid():
            return self.render_confirmation(request, action, form, selected)
        done, refused = 0, []
        for obj in selected:
            try:
                action.call(verb, obj, form.cleaned_data)
                done += 1
                self.log_steering(request, obj, action, form.cleaned_data)
            except exceptions.DurableflowError as exc:
                refused.append(exc.message)
        names = self.opts.verbose_name, self.opts.verbose_name_plural
        message = ngettext("%(count)d %(name)s %(past)s.", "%(count)d %(names)s %(past)s.", done)
        self.message_user(
            request,
            message % {"count": done, "name": names[0], "names": names[1], "past": action.past},
            messages.SUCCESS,
        )
        for reason in refused[:10]:
            self.message_user(request, f"{action.label} refused: {reason}", messages.WARNING)
        if len(refused) > 10:
            self.message_user(request, f"…and {len(refused) - 10} more refused.", messages.WARNING)
        return None

    def log_steering(self, request, obj, action: Action, data: dict[str, Any]) -> None:
        """An entry in the record's admin history: who ran which action, with which inputs."""
        inputs = json.dumps(data, sort_keys=True, ensure_ascii=False, default=str)
        self.log_change(request, obj, f"{action.label} ({action.verb_name}) {inputs[:500]}")

    # The confirmation page -------------------------------------------------------------------

    def render_confirmation(self, request, action: Action, form, objects, *, obj=None):
        opts = self.opts
        context = {
            **self.admin_site.each_context(request),
            "title": f"{action.label}: are you sure?",
            "subtitle": None,
            "opts": opts,
            "action": action,
            "form": form,
            "media": self.media + form.media,
            "rows": [(self.record_url(o), self.confirmation_row(o)) for o in objects[:50]],
            "more": max(0, len(objects) - 50),
            "object": obj,
            "bulk": obj is None,
            "back_url": self.record_url(obj) if obj is not None else request.get_full_path(),
            "action_checkbox_name": helpers.ACTION_CHECKBOX_NAME,
            "selected_pks": [o.pk for o in objects],
        }
        request.current_app = self.admin_site.name
        return TemplateResponse(request, self.confirmation_template, context)

    def confirmation_row(self, obj) -> str:
        """How one record is named on a confirmation page."""
        return str(obj)
