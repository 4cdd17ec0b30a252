"""``GET schema/``: the OpenAPI 3 description of durableflow's endpoints, and nothing else of
the project's. Needs drf-spectacular installed, not "drf_spectacular" in INSTALLED_APPS.
"""

from __future__ import annotations

from typing import Any

from django.urls import include, path
from drf_spectacular.renderers import OpenApiJsonRenderer, OpenApiYamlRenderer
from drf_spectacular.views import SpectacularAPIView

from durableflow.api.base import ApiViewMixin
from durableflow.api.renderers import JSONOnlyRenderer
from durableflow.models import Execution, StepRecord

__all__ = ["SchemaView"]

DESCRIPTION = """Start and steer durable workflows. Every 4xx is `{code, message, detail?}`.

Authentication is the project's DRF authentication (sessions need the CSRF token for changes).
Each operation needs the Django model permission its description names, as the admin checks
them: `durableflow.view_execution` to read executions and journals, `add_execution` to start,
rerun and fork, `change_execution` to steer (cancel, retry, signals, tokens, events), and
`view`/`add`/`change_workflowdocument` for documents; `is_staff` alone grants nothing, a
superuser holds every permission. An answer about an execution or a document the caller may
not view holds its id (a document's name and revision) only.
"""


class SchemaView(ApiViewMixin, SpectacularAPIView):
    """OpenAPI 3 of the endpoints mounted beside it: JSON (also as application/vnd.oai.openapi+json),
    or YAML on request (application/vnd.oai.openapi). Errors are JSON, as everywhere."""

    renderer_classes = [JSONOnlyRenderer, OpenApiJsonRenderer, OpenApiYamlRenderer]
    permission_model = Execution
    # Whoever may use the executions endpoints may read their description.
    required_permissions = {"get": ("view", "add", "change"), "head": ("view", "add", "change")}

    @property
    def custom_settings(self) -> dict[str, Any]:  # type: ignore[override]  # read when the schema is asked for
        import durableflow

        return {
            "TITLE": "durableflow API",
            "DESCRIPTION": DESCRIPTION,
            "VERSION": durableflow.__version__,
            "COMPONENT_SPLIT_REQUEST": True,
            "ENUM_NAME_OVERRIDES": {
                "ExecutionStatusEnum": Execution._meta.get_field("status").choices,
                "StepStatusEnum": StepRecord._meta.get_field("status").choices,
            },
            "POSTPROCESSING_HOOKS": [
                "drf_spectacular.hooks.postprocess_schema_enums",
                "durableflow.api.openapi.add_error_responses",
            ],
        }

    @property
    def patterns(self) -> list[Any]:  # type: ignore[override]  # read when the schema is asked for
        """The API's routes under the prefix this view is mounted at (not the project's others)."""
        from durableflow.urls import api_patterns

        mount = self.request.path_info.rsplit("schema/", 1)[0].lstrip("/")
        return [path(mount, include(api_patterns))]
