"""``events/``, ``tokens/{token}/complete/`` and ``executions/{id}/signals/``: what waits wait for.

Thin views over ``durableflow.operations.send_event``, ``complete_token`` and ``signal``: a
refusal has the code the Python API raises (``INVALID_EVENT``, ``INVALID_PAYLOAD``,
``TOKEN_NOT_FOUND`` 404, ``TOKEN_ALREADY_COMPLETED`` 409...). Each answers how many waits it
satisfied: ``{"satisfied": n}``.
"""

from __future__ import annotations

from rest_framework import serializers
from rest_framework.decorators import action
from rest_framework.response import Response

from durableflow import operations
from durableflow.api.base import ApiViewSet
from durableflow.api.openapi import document
from durableflow.api.serializers import DurableValueField, StrictSerializer, TextField
from durableflow.models import Execution

__all__ = ["EventViewSet", "TokenViewSet", "SignalSerializer", "SatisfiedSerializer"]


class EventSerializer(StrictSerializer):
    """``POST events/``: the arguments of ``durableflow.send_event``."""

    type = TextField(help_text="the event type waits and on_event workflows name")
    payload = DurableValueField(required=False, allow_null=True, default=None, help_text="a durable value (JSON)")
    event_id = TextField(required=False, allow_null=True, default=None, help_text="a repeat with this id changes nothing")


class TokenSerializer(StrictSerializer):
    """``POST tokens/{token}/complete/``: the payload the wait returns."""

    payload = DurableValueField(required=False, allow_null=True, default=None, help_text="a durable value (JSON)")


class SignalSerializer(StrictSerializer):
    """``POST executions/{id}/signals/``: the arguments of ``durableflow.signal``."""

    name = TextField(help_text="the name its wait_for_signal waits for")
    payload = DurableValueField(required=False, allow_null=True, default=None, help_text="a durable value (JSON)")


class SatisfiedSerializer(serializers.Serializer):
    satisfied = serializers.IntegerField(read_only=True, help_text="how many waits it satisfied")


def valid(serializer_class, request) -> dict:
    serializer = serializer_class(data=request.data)
    serializer.is_valid(raise_exception=True)
    return serializer.validated_data


class EventViewSet(ApiViewSet):
    # Publishing an event steers the executions that wait for it.
    permission_model = Execution
    required_permissions = {"create": "change"}

    @document(summary="Publish an event (durableflow.send_event)", request=EventSerializer,
              responses={200: SatisfiedSerializer})  # fmt: skip
    def create(self, request):
        data = valid(EventSerializer, request)
        satisfied = operations.send_event(data["type"], data["payload"], data["event_id"])
        return Response({"satisfied": satisfied})


class TokenViewSet(ApiViewSet):
    # A token is any text ("<execution id>:<step key>" by default): slashes, newlines included.
    lookup_value_regex = r"[\s\S]+"
    lookup_url_kwarg = "token"
    permission_model = Execution
    required_permissions = {"complete": "change"}

    @document(summary="Complete a token once (durableflow.complete_token)", request=TokenSerializer,
              responses={200: SatisfiedSerializer})  # fmt: skip
    @action(detail=True, methods=["post"])
    def complete(self, request, token: str):
        data = valid(TokenSerializer, request)
        return Response({"satisfied": operations.complete_token(token, data["payload"])})
