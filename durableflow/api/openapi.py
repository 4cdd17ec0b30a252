"""The API's OpenAPI description: drf-spectacular's inspector, and the error answers of every
operation with the one error shape (added by a post-processing hook, so that an operation's
own ``@extend_schema(responses=...)`` keeps them too)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any, Callable

from drf_spectacular.openapi import AutoSchema
from drf_spectacular.utils import extend_schema

__all__ = ["ApiAutoSchema", "document", "add_error_responses", "ERROR_SCHEMA"]

_READ_ERRORS = {
    "400": "INVALID_REQUEST: an unknown query parameter or a bad filter, cursor or wait",
    "401": "NOT_AUTHENTICATED (401 when the project's first authentication class names a scheme, else 403)",
    "403": "NOT_AUTHENTICATED or PERMISSION_DENIED (the operation's model permission is needed; CSRF for sessions)",
    "404": "NOT_FOUND: no such execution (or UNKNOWN_WORKFLOW outside DURABLEFLOW['API_WORKFLOWS'])",
    "405": "METHOD_NOT_ALLOWED",
    "406": "NOT_ACCEPTABLE: the API answers application/json",
    "429": "THROTTLED (the project's throttles)",
}
_WRITE_ERRORS = {
    **_READ_ERRORS,
    "400": "INVALID_JSON, INVALID_REQUEST, or the engine's verdict (UNKNOWN_WORKFLOW, INVALID_PARAMS with detail.path, "
    "UNKNOWN_STEP for a fork; an invalid document's code with detail.pointer)",
    "409": "a conflict: IDEMPOTENCY_CONFLICT, INVALID_TRANSITION (e.g. retrying a completed run), "
    "TOKEN_ALREADY_COMPLETED, NOT_FINISHED (rerun or fork of an unfinished run), FORK_VERSION_MISMATCH, DOCUMENT_EXISTS",
    "413": "PAYLOAD_TOO_LARGE: the body is over MAX_PAYLOAD_BYTES (plus 64 KiB for the envelope)",
    "415": "UNSUPPORTED_MEDIA_TYPE: bodies are application/json",
}
ID_ONLY = ("ExecutionId", "RevisionName")  # the oneOf alternatives of a caller who may not read
ERROR_SCHEMA = {
    "type": "object",
    "description": "Every 4xx answer of the API.",
    "required": ["code", "message"],
    "properties": {
        "code": {"type": "string", "description": "a stable code from durableflow.exceptions.CODES"},
        "message": {"type": "string", "description": "what went wrong, and how to fix it"},
        "detail": {
            "description": "e.g. {'path': <JSON pointer>} for INVALID_PARAMS, {'pointer': <JSON pointer>} for an "
            "invalid document, field errors for INVALID_REQUEST"
        },
    },
}


class ApiAutoSchema(AutoSchema):
    """drf-spectacular's inspector on the API's views, whatever DEFAULT_SCHEMA_CLASS says.

    Each operation's description names the permission that opens it, read from the view's
    ``required_permissions`` (what the default permission class checks); the views' class
    docstrings are about the code, not the API, and are not shown.
    """

    def get_description(self) -> str:
        from durableflow.api.permissions import required_permissions

        needed = required_permissions(self.view, SimpleNamespace(method=self.method))
        which = " or ".join(f"`{permission}`" for permission in needed) or "none: closed to everyone"
        return f"Permission: {which} (Django model permissions; a superuser holds all)."


def document(**kwargs: Any) -> Callable[[Any], Any]:
    """``@extend_schema(...)`` for the API's view methods.

    extend_schema builds on the schema class it finds on the method, else on the project's
    ``DEFAULT_SCHEMA_CLASS`` (DRF's own unless the project names drf-spectacular's), which
    cannot describe these views: the method names the API's inspector first.
    """

    def decorator(view_method: Any) -> Any:
        if not hasattr(view_method, "kwargs"):
            view_method.kwargs = {}
        view_method.kwargs.setdefault("schema", ApiAutoSchema)
        return extend_schema(**kwargs)(view_method)

    return decorator


def add_error_responses(result: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
    """A drf-spectacular post-processing hook: the error answers of every operation; and the
    answers for callers who may not read (an id, a name) hold nothing more."""
    schemas = result.setdefault("components", {}).setdefault("schemas", {})
    schemas["Error"] = ERROR_SCHEMA
    for name in ID_ONLY:
        if name in schemas:
            schemas[name]["additionalProperties"] = False  # so that a whole record is not one of them
    reference = {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}
    for operations in result.get("paths", {}).values():
        for method, operation in operations.items():
            errors = _READ_ERRORS if method in ("get", "head") else _WRITE_ERRORS
            responses = operation.setdefault("responses", {})
            for status, description in errors.items():
                responses.setdefault(status, {"description": description, "content": reference})
    return result
