"""Who may call the API: staff, or a user with the model permission the action needs.

Every API view names, per action, the permission it needs as a verb on a model
(``required_permissions = {"list": "view", "create": "add", "cancel": "change"}`` with
``permission_model = Execution``): ``durableflow.view_execution``, ``add_execution``,
``change_execution``. ``DURABLEFLOW["API_PERMISSION_CLASSES"]`` replaces the default class for
every API view; a replacement can read the same ``required_permission(view, request)``.

The views set these classes themselves: DRF's project-wide default (``AllowAny`` unless the
project says otherwise) never applies to them.
"""

from __future__ import annotations

from typing import Any

from django.utils.module_loading import import_string
from rest_framework.permissions import BasePermission

from durableflow.conf import df_settings

__all__ = ["IsStaffOrModelPermission", "required_permission", "permission_classes"]


def required_permission(view: Any, request: Any) -> str | None:
    """``"app_label.verb_model"`` for the view's current action, or None if the action has none."""
    action = getattr(view, "action", None) or request.method.lower()
    verb = getattr(view, "required_permissions", {}).get(action)
    model = getattr(view, "permission_model", None)
    if verb is None or model is None:
        return None
    opts = model._meta
    return f"{opts.app_label}.{verb}_{opts.model_name}"


class IsStaffOrModelPermission(BasePermission):
    """An authenticated, active user who is staff or holds the action's model permission.

    An action that names no permission is refused to everyone but staff, so that a new
    action cannot be opened by forgetting to name one.
    """

    message = "staff or the permission {permission} is needed"

    def has_permission(self, request: Any, view: Any) -> bool:
        user = getattr(request, "user", None)
        if user is None or not user.is_authenticated or not user.is_active:
            return False
        if user.is_staff:
            return True
        permission = required_permission(view, request)
        self.message = self.message.format(permission=permission or "(none: staff only)")
        return permission is not None and user.has_perm(permission)


def permission_classes() -> list[type[BasePermission]]:
    """The classes ``DURABLEFLOW["API_PERMISSION_CLASSES"]`` names (dotted paths or classes)."""
    return [import_string(entry) if isinstance(entry, str) else entry for entry in df_settings.API_PERMISSION_CLASSES]
