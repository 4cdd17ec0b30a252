"""``GET workflows/``: the workflows the API may start, every registered version; and which those are.

``DURABLEFLOW["API_WORKFLOWS"]`` (None: all registered ones) decides. A name outside it is
answered exactly like a name nobody registered, 404 ``UNKNOWN_WORKFLOW``, so that the API
does not reveal which workflows exist.
"""

from __future__ import annotations

from typing import Any

from rest_framework.response import Response

from durableflow.api.base import ApiViewSet
from durableflow.api.errors import ApiError
from durableflow.api.openapi import document
from durableflow.api.serializers import WorkflowListSerializer, WorkflowSerializer
from durableflow.conf import df_settings
from durableflow.models import Execution
from durableflow.orm.documents import registry
from durableflow.registry import WorkflowDefinition

__all__ = ["WorkflowViewSet", "exposed", "check_exposed"]


def exposed() -> list[WorkflowDefinition]:
    """The workflows the API may start (every version of code workflows, and workflow documents'
    newest valid revisions), by name, then oldest version first."""
    allowed = df_settings.API_WORKFLOWS
    return [definition for definition in registry.versions() if allowed is None or definition.name in allowed]


def check_exposed(name: str, *, named: bool = True) -> None:
    """404 ``UNKNOWN_WORKFLOW`` for a name outside ``API_WORKFLOWS`` (registered or not).

    ``named=False``: the caller did not give the name (a rerun's workflow) and is not told it.
    """
    allowed = df_settings.API_WORKFLOWS
    if allowed is not None and name not in allowed:
        which = repr(name) if named else "of this execution"
        raise ApiError(
            404,
            code="UNKNOWN_WORKFLOW",
            message=f"No workflow {which} can be started over the API (see GET workflows/).",
        )


def describe(definition: WorkflowDefinition) -> dict[str, Any]:
    return {
        "name": definition.name,
        "version": definition.version,
        "kind": definition.kind,
        "description": definition.description,
        "on_event": definition.on_event,
        "default": registry.is_current(definition),
    }


class WorkflowViewSet(ApiViewSet):
    permission_model = Execution
    required_permissions = {"list": ("view", "add")}  # those who read runs, and those who start them
    serializer_class = WorkflowSerializer
    pagination_class = None

    @document(
        summary="The workflows the API may start",
        responses=WorkflowListSerializer,
    )
    def list(self, request):
        return Response({"results": WorkflowSerializer([describe(d) for d in exposed()], many=True).data})
