"""One error shape for every 4xx the API answers: ``{"code", "message", "detail"?}``.

``exception_handler`` is the API views' own (set on the views, not in the project's
``REST_FRAMEWORK``): durableflow's errors keep the code the Python API raises (and its
``detail``, e.g. the JSON pointer of an invalid param), DRF's get one of the codes in
``HTTP_CODES``. Anything else is not bad input but a fault: it propagates (a 500, logged).

A capability that adds a conflict or a missing thing adds its code to ``STATUS_BY_CODE``.
"""

from __future__ import annotations

import re
from typing import Any, NamedTuple

from django.core.exceptions import PermissionDenied as DjangoPermissionDenied
from django.http import Http404, JsonResponse
from django.views.decorators.csrf import csrf_exempt
from rest_framework import exceptions as drf
from rest_framework.response import Response
from rest_framework.views import set_rollback

from durableflow import exceptions
from durableflow.api.parsers import PayloadTooLarge

__all__ = ["exception_handler", "ApiError", "STATUS_BY_CODE", "HTTP_CODES", "error_body", "bounded", "not_found"]

# durableflow codes whose HTTP status is not 400 (a refused start or value is a 400).
STATUS_BY_CODE: dict[str, int] = {
    "NOT_FOUND": 404,
    "IDEMPOTENCY_CONFLICT": 409,
    "INVALID_TRANSITION": 409,
    "NOT_FINISHED": 409,
    "FORK_VERSION_MISMATCH": 409,
    "PAYLOAD_TOO_LARGE": 413,
    "DOCUMENT_EXISTS": 409,
    "DOCUMENT_NAME_TAKEN": 409,
    "TOKEN_NOT_FOUND": 404,
    "TOKEN_ALREADY_COMPLETED": 409,
}
# Errors that are the caller's to fix: answered 400 unless STATUS_BY_CODE says otherwise.
CLIENT_ERRORS = (
    exceptions.WorkflowStartError,
    exceptions.WorkflowValueError,
    exceptions.ExecutionNotFound,
    exceptions.InvalidTransition,
    exceptions.DocumentError,  # detail.pointer: the offending member of the document
)


class HttpCode(NamedTuple):
    exception: type[Exception]
    code: str


# DRF's exceptions, most specific first. PayloadTooLarge is the parser's 413.
HTTP_CODES = (
    HttpCode(drf.ParseError, code="INVALID_JSON"),
    HttpCode(drf.ValidationError, code="INVALID_REQUEST"),
    HttpCode(drf.NotAuthenticated, code="NOT_AUTHENTICATED"),
    HttpCode(drf.AuthenticationFailed, code="NOT_AUTHENTICATED"),
    HttpCode(drf.PermissionDenied, code="PERMISSION_DENIED"),
    HttpCode(drf.NotFound, code="NOT_FOUND"),
    HttpCode(drf.MethodNotAllowed, code="METHOD_NOT_ALLOWED"),
    HttpCode(drf.NotAcceptable, code="NOT_ACCEPTABLE"),
    HttpCode(drf.UnsupportedMediaType, code="UNSUPPORTED_MEDIA_TYPE"),
    HttpCode(drf.Throttled, code="THROTTLED"),
    HttpCode(PayloadTooLarge, code="PAYLOAD_TOO_LARGE"),
)


class ApiError(drf.APIException):
    """An answer the API decides itself: ``ApiError(404, code="UNKNOWN_WORKFLOW", message=...)``."""

    def __init__(self, status: int, *, code: str, message: str, **detail: Any):
        self.status_code = status
        self.error_code = code
        self.message = message
        self.error_detail = detail
        super().__init__(message, code)


def error_body(code: str, message: str, detail: Any = None) -> dict[str, Any]:
    """The one error shape, bounded: an answer quotes at most a short excerpt of any input."""
    body: dict[str, Any] = {"code": code, "message": bounded(message)}
    if detail:
        body["detail"] = _bounded_detail(detail)
    return body


# An error answer is a few KB at most, whatever the input it refuses holds (a 1 MB name, a
# body of 100,000 unknown members): messages quote an excerpt, detail keeps the first entries.
MAX_MESSAGE = 600
MAX_KEY = 100
MAX_TEXT = 1100  # a JSON pointer 512 levels deep
MAX_ENTRIES = 20
_LONG_WORD = re.compile(r"\S{81,}")


def bounded(text: str, limit: int = MAX_MESSAGE) -> str:
    """``text`` with each run of more than 80 non-blank characters (a quoted input, most
    likely) cut to an excerpt, and the whole to ``limit``."""
    text = _LONG_WORD.sub(_excerpt, text)
    return text if len(text) <= limit else f"{text[: limit - 120]} … {text[-100:]}"


def _excerpt(match: re.Match[str]) -> str:
    word = match.group()
    return f"{word[:60]}…{word[-12:]}"


def _bounded_detail(detail: Any) -> Any:
    if isinstance(detail, str):
        return detail if len(detail) <= MAX_TEXT else f"{detail[: MAX_TEXT - 1]}…"
    if isinstance(detail, dict):
        items = list(detail.items())
        entries = {bounded(str(key), MAX_KEY): _bounded_detail(value) for key, value in items[:MAX_ENTRIES]}
        if len(items) > MAX_ENTRIES:
            entries["…"] = f"and {len(items) - MAX_ENTRIES} more"
        return entries
    if isinstance(detail, (list, tuple)):
        first = [_bounded_detail(item) for item in detail[:MAX_ENTRIES]]
        if len(detail) > MAX_ENTRIES:
            first.append(f"and {len(detail) - MAX_ENTRIES} more")
        return first
    return detail


def exception_handler(exc: Exception, context: dict[str, Any]) -> Response | None:
    """DRF's exception handler contract: a Response, or None to let the exception propagate."""
    if isinstance(exc, Http404):
        exc = drf.NotFound(str(exc) or "not found")
    elif isinstance(exc, DjangoPermissionDenied):
        exc = drf.PermissionDenied(str(exc) or None)

    headers: dict[str, str] = {}
    if isinstance(exc, ApiError):
        status, body = exc.status_code, error_body(exc.error_code, exc.message, exc.error_detail)
    elif isinstance(exc, exceptions.DurableflowError):
        if not isinstance(exc, CLIENT_ERRORS):
            return None
        status = STATUS_BY_CODE.get(exc.code, 400)
        body = error_body(exc.code, exc.message, exc.detail)
    elif isinstance(exc, drf.APIException):
        status = exc.status_code
        code = next((entry.code for entry in HTTP_CODES if isinstance(exc, entry.exception)), None)
        if code is None:  # a project's own APIException: keep its status, name it by its code
            code = str(exc.default_code).upper()
        body = _drf_body(exc, code)
        if getattr(exc, "auth_header", None):
            headers["WWW-Authenticate"] = exc.auth_header
        if getattr(exc, "wait", None):
            headers["Retry-After"] = str(int(exc.wait))
    else:
        return None
    set_rollback()
    return Response(body, status=status, headers=headers)


def _drf_body(exc: drf.APIException, code: str) -> dict[str, Any]:
    if isinstance(exc, drf.ValidationError):
        detail = _plain(exc.detail)
        if isinstance(detail, list):
            detail = {"non_field_errors": detail}
        return error_body(code, _first_message(detail), detail)
    if isinstance(exc, drf.Throttled):
        return error_body(code, str(exc.detail), {"wait": exc.wait} if exc.wait is not None else None)
    return error_body(code, str(exc.detail))


def _plain(detail: Any) -> Any:
    """DRF's ``ErrorDetail`` tree as plain JSON (strings, lists, dicts)."""
    if isinstance(detail, dict):
        return {str(key): _plain(value) for key, value in detail.items()}
    if isinstance(detail, (list, tuple)):
        return [_plain(item) for item in detail]
    return str(detail)


def _first_message(detail: Any) -> str:
    """``"field: message"`` of the first error in a ValidationError's tree."""
    names = []
    while detail and isinstance(detail, (dict, list)):
        if isinstance(detail, dict):
            name, detail = next(iter(detail.items()))
            if name != "non_field_errors":
                names.append(name)
        else:
            detail = detail[0]
    return f"{'.'.join(names)}: {detail}" if names else str(detail)


@csrf_exempt  # a POST to no endpoint is a JSON 404, not the CSRF middleware's HTML 403
def not_found(request, *args: Any, **kwargs: Any) -> JsonResponse:
    """Every other path under the API's mount: a JSON 404, not the project's HTML page."""
    return JsonResponse(error_body("NOT_FOUND", f"no API endpoint at {request.path}"), status=404)
