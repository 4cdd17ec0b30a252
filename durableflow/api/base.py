"""What every API view shares: JSON in and out, the permission classes, the error shape, and
no query parameter that nobody declared.

A resource's views (``executions.py``, ``workflows.py``, ``waits.py``, ``documents.py``)
subclass ``ApiViewSet`` and declare, per action, the model permission it needs
(``required_permissions``, see ``permissions.py``) and the query parameters it reads
(``extra_query_params``, plus its filter set's and paginator's). They call
``durableflow.operations`` for every change.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rest_framework import viewsets
from rest_framework.exceptions import MethodNotAllowed, NotFound, ValidationError
from rest_framework.settings import api_settings

from durableflow import values
from durableflow.api import errors, throttles
from durableflow.api.openapi import ApiAutoSchema
from durableflow.api.parsers import StrictJSONParser
from durableflow.api.permissions import permission_classes
from durableflow.api.renderers import JSONOnlyRenderer

__all__ = ["ApiViewMixin", "ApiViewSet"]

# DRF's own: ?format=json picks a renderer (and is harmless with one).
ALWAYS_ALLOWED = frozenset({"format"})

if TYPE_CHECKING:  # what ApiViewMixin is mixed into
    from rest_framework.views import APIView as _APIView
else:
    _APIView = object


class ApiViewMixin(_APIView):
    """The API's policies on any DRF view, whatever the project's ``REST_FRAMEWORK`` defaults."""

    parser_classes = [StrictJSONParser]
    renderer_classes: list[type[Any]] = [JSONOnlyRenderer]
    metadata_class = None  # no OPTIONS description: 405, like any method an endpoint lacks
    schema = ApiAutoSchema()
    permission_model: Any = None
    required_permissions: dict[str, str | tuple[str, ...]] = {}
    extra_query_params: dict[str, frozenset[str]] = {}

    def get_authenticators(self):
        # The project's DRF authentication, read when the request comes (DRF's class
        # attribute is read once, at import).
        return [authentication() for authentication in api_settings.DEFAULT_AUTHENTICATION_CLASSES]

    def get_throttles(self):
        # The project's, read when the request comes, as its authentication classes are.
        return [throttle() for throttle in api_settings.DEFAULT_THROTTLE_CLASSES]

    def check_throttles(self, request) -> None:
        """DRF's check (after authentication) of the throttles that look at the user."""
        self._throttle(request, [t for t in self.get_throttles() if not throttles.before_authentication(t)])

    def _throttle(self, request, checked) -> None:
        waits = [throttle.wait() for throttle in checked if not throttle.allow_request(request, self)]
        if waits:
            self.throttled(request, max((wait for wait in waits if wait is not None), default=None))

    def get_permissions(self):
        return [permission() for permission in permission_classes()]

    def get_exception_handler(self):
        return errors.exception_handler

    def handle_exception(self, exc):
        response = super().handle_exception(exc)
        # Errors are JSON in the one shape whatever was negotiated (an event stream's refusal too).
        if not isinstance(getattr(self.request, "accepted_renderer", None), JSONOnlyRenderer):
            self.request.accepted_renderer = JSONOnlyRenderer()
            self.request.accepted_media_type = JSONOnlyRenderer.media_type
        return response

    def initial(self, request, *args, **kwargs) -> None:
        if not self.answers(request.method):
            # 405 before the permission check (which would refuse a method no action names):
            # which methods an endpoint answers is no secret, its schema says so.
            raise MethodNotAllowed(request.method)
        # Before the credentials are checked (a wrong password costs its hash): see throttles.py.
        self._throttle(request, [t for t in self.get_throttles() if throttles.before_authentication(t)])
        super().initial(request, *args, **kwargs)  # negotiation, authentication, permissions, throttles
        self.check_query_params(request)
        self.check_path(kwargs)

    def check_path(self, kwargs: dict[str, Any]) -> None:
        """404 for an id, name or token in the path that no row can hold (a NUL: PostgreSQL
        refuses the query itself; a lone surrogate), before any query is made with it."""
        for value in kwargs.values():
            if isinstance(value, str) and values.text_fault(value) is not None:
                raise NotFound("no such record: the path holds a character no name or id can")

    def answers(self, method: str) -> bool:
        """Whether this endpoint has a handler for ``method`` (OPTIONS: none, see metadata_class)."""
        method = method.lower()
        return method in self.http_method_names and method != "options" and hasattr(self, method)

    def allowed_query_params(self) -> set[str]:
        action = getattr(self, "action", None) or self.request.method.lower()
        return set(ALWAYS_ALLOWED | self.extra_query_params.get(action, frozenset()))

    def check_query_params(self, request) -> None:
        unknown = sorted(set(request.query_params) - self.allowed_query_params())
        if unknown:
            allowed = ", ".join(sorted(self.allowed_query_params() - ALWAYS_ALLOWED)) or "none"
            message = f"unknown query parameter; this endpoint reads: {allowed}"
            raise ValidationError({name: [message] for name in unknown})
        # "?status=" is not "any status", and "?status=a&status=b" is not "a or b": refused, not guessed.
        wrong = {}
        for name, given in request.query_params.lists():
            if len(given) > 1:
                wrong[name] = ["given more than once"]
            elif given == [""]:
                wrong[name] = ["empty; leave the parameter out instead"]
        if wrong:
            raise ValidationError(wrong)


class ApiViewSet(ApiViewMixin, viewsets.GenericViewSet):
    """A resource's viewset. ``list`` reads its filter set's fields and its paginator's parameters."""

    list_actions = frozenset({"list"})

    def allowed_query_params(self) -> set[str]:
        allowed = super().allowed_query_params()
        if self.action in self.list_actions:
            if self.paginator is not None:
                allowed |= self.paginator.query_params()
            filterset_class = getattr(self, "filterset_class", None)
            if filterset_class is not None:
                allowed |= set(filterset_class.base_filters)
        return allowed
