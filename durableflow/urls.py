"""The REST API. In the project's urls.py:

    path("api/durableflow/", include("durableflow.urls")),

Every path under that prefix answers JSON, an unknown one a JSON 404.
"""

from __future__ import annotations

from django.urls import path, re_path
from rest_framework.routers import SimpleRouter

from durableflow.api import errors
from durableflow.api.documents import DocumentViewSet
from durableflow.api.executions import ExecutionViewSet
from durableflow.api.schema import SchemaView
from durableflow.api.waits import EventViewSet, TokenViewSet
from durableflow.api.workflows import WorkflowViewSet

app_name = "durableflow"

# SimpleRouter: DefaultRouter's API root view would take the project's default permissions.
router = SimpleRouter()
router.register("executions", ExecutionViewSet, basename="execution")
router.register("workflows", WorkflowViewSet, basename="workflow")
router.register("events", EventViewSet, basename="event")
router.register("tokens", TokenViewSet, basename="token")
router.register("documents", DocumentViewSet, basename="document")

# What the OpenAPI schema describes.
api_patterns = [*router.urls]

urlpatterns = [
    *api_patterns,
    path("schema/", SchemaView.as_view(), name="schema"),
    re_path(r"", errors.not_found),
]
