"""What the API reads and writes. Serializers check shapes and types; the engine decides.

Input serializers take only the fields a caller may set and refuse any other (``status``,
``lease_token``, ``attempts``... cannot be written, not even silently ignored). Strings are
taken as they are (no trimming, no NUL check of DRF's own): the engine's checks give the
verdict, with the code the Python API raises. Durable values (params, payloads) are passed to
the engine untouched, so that the codec answers with the same code and JSON pointer.
"""

from __future__ import annotations

from typing import Any

from django.utils.dateparse import parse_datetime
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import PolymorphicProxySerializer, extend_schema_field, extend_schema_serializer
from rest_framework import serializers

from durableflow.models import Execution, StepRecord

MAX_NAMED = 10  # unknown fields named in a refusal

__all__ = [
    "StrictSerializer",
    "TextField",
    "DurableValueField",
    "DeadlineField",
    "StartSerializer",
    "CancelSerializer",
    "ForkSerializer",
    "ExecutionSerializer",
    "ExecutionSummarySerializer",
    "ExecutionIdSerializer",
    "execution_or_id",
    "whole_or",
    "StepRecordSerializer",
    "WorkflowSerializer",
    "WorkflowListSerializer",
    "ErrorSerializer",
]


@extend_schema_field(OpenApiTypes.STR)
class TextField(serializers.Field):
    """A JSON string, unchanged (DRF's CharField would accept numbers and trim spaces)."""

    default_error_messages = {"invalid": "must be a string"}

    def to_internal_value(self, data: Any) -> str:
        if not isinstance(data, str):
            self.fail("invalid")
        return data

    def to_representation(self, value: Any) -> str:
        return value


@extend_schema_field({"oneOf": [{"type": "number"}, {"type": "string", "format": "date-time"}]})
class DeadlineField(serializers.Field):
    """Seconds from the start (a number), or an ISO 8601 date and time with its UTC offset; the
    engine checks the range."""

    default_error_messages = {
        "invalid": "must be a number of seconds or an ISO 8601 date and time with a UTC offset "
        "(2026-12-02T02:00:00+00:00)"
    }

    def to_internal_value(self, data: Any) -> Any:
        if isinstance(data, (int, float)) and not isinstance(data, bool):
            return data
        if isinstance(data, str) and len(data) <= 64:
            try:
                moment = parse_datetime(data)
            except ValueError:
                moment = None
            if moment is not None and moment.utcoffset() is not None:
                return moment
        self.fail("invalid")

    def to_representation(self, value: Any) -> Any:
        return value


@extend_schema_field(OpenApiTypes.ANY)
class DurableValueField(serializers.Field):
    """Any JSON value, handed to the engine as parsed: its codec gives the verdict."""

    def to_internal_value(self, data: Any) -> Any:
        return data

    def to_representation(self, value: Any) -> Any:
        return value


class StrictSerializer(serializers.Serializer):
    """Refuses members it does not declare, naming the ones it takes."""

    def to_internal_value(self, data: Any) -> Any:
        if isinstance(data, dict):
            unknown = set(data) - set(self.fields)
            if unknown:
                writable = ", ".join(name for name, field in self.fields.items() if not field.read_only)
                message = f"unknown or read-only field; this request takes: {writable}"
                # The first few only: a body may hold 100,000 of them.
                named = sorted(unknown)[:MAX_NAMED]
                errors = {name: [message] for name in named}
                if len(unknown) > MAX_NAMED:
                    errors["non_field_errors"] = [f"and {len(unknown) - MAX_NAMED} more unknown fields"]
                raise serializers.ValidationError(errors)
        return super().to_internal_value(data)


class StartSerializer(StrictSerializer):
    """``POST executions/``: the arguments of ``durableflow.start``."""

    workflow = TextField(help_text="a registered workflow's name")
    params = DurableValueField(required=False, allow_null=True, default=None, help_text="a durable value (JSON)")
    idempotency_key = TextField(
        required=False, allow_null=True, default=None, help_text="or the Idempotency-Key header"
    )
    execution_id = TextField(required=False, allow_null=True, default=None, help_text="the new execution's id")
    deadline = DeadlineField(
        required=False,
        allow_null=True,
        default=None,
        help_text="seconds from now, or a date and time: still unfinished then, the run is cancelled "
        "(DEADLINE_EXCEEDED)",
    )


class CancelSerializer(StrictSerializer):
    """``POST executions/{id}/cancel/``: an optional reason, recorded as the error's message."""

    reason = TextField(required=False, allow_null=True, default=None, help_text="recorded with the cancellation")


class ForkSerializer(StrictSerializer):
    """``POST executions/{id}/fork/``: the step the new execution runs again from."""

    from_step = TextField(help_text="a step key of the execution's journal; the records before it are kept")


class ExecutionSummarySerializer(serializers.ModelSerializer):
    """An execution in a list: what it is and where it stands, without its values."""

    parent = serializers.CharField(source="parent_id", read_only=True, allow_null=True)

    class Meta:
        model = Execution
        fields = [
            "id",
            "workflow",
            "version",
            "status",
            "waiting_for",
            "wake_at",
            "parent",
            "root_id",
            "created_at",
            "started_at",
            "finished_at",
        ]
        read_only_fields = fields


class ExecutionSerializer(ExecutionSummarySerializer):
    """One execution: status, what it waits for, params, result, error, metadata, its compensation
    report, and the execution it was rerun or forked from (``origin_*``)."""

    params = DurableValueField(read_only=True)
    result = DurableValueField(read_only=True)
    error = DurableValueField(read_only=True)
    metadata = DurableValueField(read_only=True)
    waiting_for = DurableValueField(read_only=True)
    cancel_requested = DurableValueField(
        read_only=True, help_text="a cancel accepted while its compensations run: the error it will end with"
    )
    compensations = DurableValueField(
        read_only=True, help_text="the compensation report: step, status, error, duration, in the order they ran"
    )
    concurrency_key = serializers.CharField(
        read_only=True,
        allow_null=True,
        help_text="the run's key under its workflow's concurrency limit (null: not limited); while it waits for "
        "a slot, waiting_for is {kind: concurrency, key, position}",
    )

    class Meta(ExecutionSummarySerializer.Meta):
        fields = [
            *ExecutionSummarySerializer.Meta.fields,
            "params",
            "result",
            "error",
            "metadata",
            "idempotency_key",
            "queue",
            "deliveries",
            "deadline_at",
            "concurrency_key",
            "cancel_requested",
            "compensations",
            "origin_id",
            "origin_kind",
            "origin_step",
        ]
        read_only_fields = fields


class ExecutionIdSerializer(serializers.Serializer):
    """An execution the caller acted on but may not read (no view permission): its id only."""

    id = serializers.CharField(read_only=True)


def whole_or(component_name: str, whole: type, brief: type) -> PolymorphicProxySerializer:
    """An answer about a record: ``whole`` for a caller who may view such records, else ``brief``."""
    return PolymorphicProxySerializer(
        component_name=component_name, serializers=[whole, brief], resource_type_field_name=None
    )


def execution_or_id() -> PolymorphicProxySerializer:
    return whole_or("ExecutionOrId", ExecutionSerializer, ExecutionIdSerializer)


class StepRecordSerializer(serializers.ModelSerializer):
    """One journal record: key, kind, status, attempts, value, error, times."""

    value = DurableValueField(read_only=True)
    error = DurableValueField(read_only=True)

    class Meta:
        model = StepRecord
        fields = ["key", "kind", "status", "attempts", "value", "error", "started_at", "finished_at"]
        read_only_fields = fields


class WorkflowSerializer(serializers.Serializer):
    """A workflow the API may start."""

    name = serializers.CharField(read_only=True)
    version = serializers.CharField(read_only=True)
    kind = serializers.CharField(read_only=True, help_text="code, or document (a workflow document's newest valid revision)")
    description = serializers.CharField(read_only=True)
    on_event = serializers.CharField(read_only=True, allow_null=True)
    default = serializers.BooleanField(
        read_only=True, help_text="whether a start of this name runs this version (others run only the executions started with them)"
    )


@extend_schema_serializer(many=False)  # the list action answers one object, not a list
class WorkflowListSerializer(serializers.Serializer):
    results = WorkflowSerializer(many=True, read_only=True)


class ErrorSerializer(serializers.Serializer):
    """Every 4xx answer."""

    code = serializers.CharField(help_text="a stable code from durableflow.exceptions.CODES")
    message = serializers.CharField(help_text="what went wrong and how to fix it")
    detail = DurableValueField(required=False, help_text="e.g. the JSON pointer of an invalid param, or field errors")
