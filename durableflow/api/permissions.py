"""Who may call the API: Django's model permissions, as the admin checks them.

Every API view names, per action, the permission it needs as a verb on a model
(``required_permissions = {"list": "view", "create": "add", "cancel": "change"}`` with
``permission_model = Execution``), or a tuple of verbs of which one is enough:

- ``durableflow.view_execution``: read executions and their journals;
- ``add_execution``: start (and rerun, fork);
- ``change_execution``: steer (cancel, retry, signals, tokens, events);
- ``view_workflowdocument``, ``add_workflowdocument``, ``change_workflowdocument``: documents.

``is_staff`` grants nothing (it means "may log into the admin"); a superuser holds every
permission. An action that names none is refused to everyone, so that a new action cannot be
opened by forgetting to name one. ``DURABLEFLOW["API_PERMISSION_CLASSES"]`` replaces the
default class for every API view; a replacement can read the same ``required_permissions``.

``may_view(view, request)`` answers whether the caller could read the records it acts on
(with the configured classes): an answer about an execution shows its id only otherwise, one
about a document its name and revision.

The views set these classes themselves: DRF's project-wide default (``AllowAny`` unless the
project says otherwise) never applies to them.
"""

from __future__ import annotations

import copy
from typing import Any

from django.utils.module_loading import import_string
from rest_framework.permissions import BasePermission

from durableflow.conf import df_settings

__all__ = ["ModelPermission", "required_permissions", "permission_classes", "may_view"]


def required_permissions(view: Any, request: Any) -> tuple[str, ...]:
    """``("app_label.verb_model", ...)``: one of them opens the view's current action (none: closed)."""
    action = getattr(view, "action", None) or request.method.lower()
    verbs = getattr(view, "required_permissions", {}).get(action)
    model = getattr(view, "permission_model", None)
    if verbs is None or model is None:
        return ()
    opts = model._meta
    verbs = (verbs,) if isinstance(verbs, str) else verbs
    return tuple(f"{opts.app_label}.{verb}_{opts.model_name}" for verb in verbs)


class ModelPermission(BasePermission):
    """An authenticated, active user holding (one of) the action's model permission(s)."""

    message = "the permission {permission} is needed"

    def has_permission(self, request: Any, view: Any) -> bool:
        user = getattr(request, "user", None)
        if user is None or not user.is_authenticated or not user.is_active:
            return False
        needed = required_permissions(view, request)
        self.message = self.message.format(permission=" or ".join(needed) or "(none: this action is closed)")
        return any(user.has_perm(permission) for permission in needed)


def permission_classes() -> list[type[BasePermission]]:
    """The classes ``DURABLEFLOW["API_PERMISSION_CLASSES"]`` names (dotted paths or classes)."""
    return [import_string(entry) if isinstance(entry, str) else entry for entry in df_settings.API_PERMISSION_CLASSES]


def may_view(view: Any, request: Any) -> bool:
    """Whether the caller may read one of the records ``view`` serves (its ``retrieve`` action,
    ``GET executions/{id}/``, ``GET documents/{name}/``), by the configured classes."""
    reader = copy.copy(view)
    reader.action = "retrieve"
    return all(permission().has_permission(request, reader) for permission in permission_classes())
