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


class SchemaView(ApiViewMixin, SpectacularAPIView):
    """OpenAPI 3 of the endpoints mounted beside it: JSON (also as application/vnd.oai.openapi+json),
    or YAML on request (application/vnd.oai.openapi). Errors are JSON, as everywhere."""

    renderer_classes = [JSONOnlyRenderer, OpenApiJsonRenderer, OpenApiYamlRenderer]
    permission_model = Execution
    required_permissions = {"get": "view", "head": "view"}

    @property
    def custom_settings(self) -> dict[str, Any]:
        import durableflow

        return {
            "TITLE": "durableflow API",
            "DESCRIPTION": "Start and steer durable workflows (SPEC §10). Every 4xx is {code, message, detail?}.",
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
    def patterns(self) -> list[Any]:
        """The API's routes under the prefix this view is mounted at (not the project's others)."""
        from durableflow.urls import api_patterns

        mount = self.request.path_info.rsplit("schema/", 1)[0].lstrip("/")
        return [path(mount, include(api_patterns))]
