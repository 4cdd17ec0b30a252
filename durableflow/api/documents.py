"""``documents/``: workflow documents, one revision per save.

``POST documents/`` ``{"name", "document"}`` saves revision 1 of a new name (201);
``PUT documents/{name}/`` ``{"document"}`` saves the next revision (200; the same document
again keeps the revision it has). An invalid document is answered 400 with its code and the
JSON pointer of the offending member in ``detail.pointer``, and nothing is saved.
``GET documents/`` lists the newest revision of each name, ``GET documents/{name}/`` shows the
newest (``?revision=`` another) with its compiled form, ``GET documents/{name}/revisions/``
lists them all. A valid document is started like any workflow: ``POST executions/``.
"""

from __future__ import annotations

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, PolymorphicProxySerializer
from rest_framework import serializers
from rest_framework.decorators import action
from rest_framework.response import Response

from durableflow import exceptions, operations
from durableflow.api import params
from durableflow.api.base import ApiViewSet
from durableflow.api.openapi import document as describe
from durableflow.api.pagination import KeysetPagination
from durableflow.api.permissions import may_view
from durableflow.api.serializers import DurableValueField, StrictSerializer, TextField, whole_or
from durableflow.models import WorkflowDocument
from durableflow.orm import db_alias

__all__ = ["DocumentViewSet"]

MAX_REVISION = 2**31 - 1  # the column's range
REVISION = OpenApiParameter("revision", OpenApiTypes.INT, description="a revision number (default: the newest)")


class DocumentPagination(KeysetPagination):
    """Documents by name (the newest revision of each: one row per name)."""

    keys = ("name",)


class RevisionPagination(KeysetPagination):
    """A document's revisions, newest first."""

    keys = ("revision",)
    default_descending = True


class CreateSerializer(StrictSerializer):
    """``POST documents/``: a new document's name and its first revision."""

    name = TextField(help_text="the workflow name it is started by (not a code workflow's; no '/')")
    document = DurableValueField(help_text='{"$workflow": "0.2", "initial": ..., "states": {...}}')


class UpdateSerializer(StrictSerializer):
    """``PUT documents/{name}/``: the next revision."""

    document = DurableValueField(help_text='{"$workflow": "0.2", "initial": ..., "states": {...}}')


class RevisionSummarySerializer(serializers.ModelSerializer):
    """A revision in a list: which it is and whether it can run, without its JSON."""

    version = serializers.CharField(read_only=True, help_text="the workflow version of executions pinned to it")
    error = DurableValueField(read_only=True, help_text="the first problem found: {code, message, pointer}")

    class Meta:
        model = WorkflowDocument
        fields = ["name", "revision", "version", "valid", "error", "created_at"]
        read_only_fields = fields


class RevisionSerializer(RevisionSummarySerializer):
    """A revision: the document as saved and its compiled form (what its executions run)."""

    document = DurableValueField(read_only=True, source="authored", help_text="as saved (members in that order)")
    compiled = DurableValueField(read_only=True)

    class Meta(RevisionSummarySerializer.Meta):
        fields = [*RevisionSummarySerializer.Meta.fields, "document", "compiled"]
        read_only_fields = fields


class RevisionNameSerializer(serializers.Serializer):
    """A revision the caller saved but may not read (no view permission): which it is."""

    name = serializers.CharField(read_only=True)
    revision = serializers.IntegerField(read_only=True)


def revision_or_name() -> PolymorphicProxySerializer:
    return whole_or("RevisionOrName", RevisionSerializer, RevisionNameSerializer)


class DocumentViewSet(ApiViewSet):
    lookup_field = "name"
    lookup_value_regex = "[^/]+"
    permission_model = WorkflowDocument
    required_permissions = {
        "list": "view",
        "retrieve": "view",
        "revisions": "view",
        "create": "add",
        "update": "change",
    }
    pagination_class = DocumentPagination
    list_actions = frozenset({"list", "revisions"})  # each reads its paginator's cursor and page_size
    extra_query_params = {"retrieve": frozenset({"revision"})}
    serializer_class = RevisionSerializer

    def get_queryset(self):
        return WorkflowDocument.objects.using(db_alias())

    def get_serializer_class(self):
        return {
            "list": RevisionSummarySerializer,
            "revisions": RevisionSummarySerializer,
            "create": CreateSerializer,
            "update": UpdateSerializer,
        }.get(self.action, RevisionSerializer)

    @describe(summary="Workflow documents: the newest revision of each, by name")
    def list(self, request):
        fields = [f for f in RevisionSummarySerializer.Meta.fields if f != "version"]
        page = self.paginate_queryset(self.get_queryset().latest().only(*fields))
        return self.get_paginated_response(RevisionSummarySerializer(page, many=True).data)

    @describe(
        summary="Save a new workflow document (revision 1); 400 with code and detail.pointer if invalid",
        request=CreateSerializer,
        responses={201: revision_or_name()},
    )
    def create(self, request):
        data = self._valid(CreateSerializer, request)
        row, _ = operations.save_document(data["name"], data["document"], new=True)
        return self._saved(request, row, status=201)

    @describe(summary="A document's newest revision (or ?revision=), with its compiled form", parameters=[REVISION])
    def retrieve(self, request, name: str):
        rows = self.get_queryset().named(name)
        revision = params.integer(request, "revision", low=1, high=MAX_REVISION)
        if revision is not None:
            rows = rows.filter(revision=revision)
        row = rows.first()
        if row is None:
            which = f"{name!r} revision {revision}" if revision else repr(name)
            raise exceptions.ExecutionNotFound(message=f"no workflow document {which}")
        return Response(RevisionSerializer(row).data)

    @describe(
        summary="Save the next revision; running executions keep theirs. 400 with code and detail.pointer if invalid",
        request=UpdateSerializer,
        responses=revision_or_name(),
    )
    def update(self, request, name: str):
        data = self._valid(UpdateSerializer, request)
        row, _ = operations.save_document(name, data["document"], new=False)
        return self._saved(request, row)

    def _saved(self, request, row, status: int = 200) -> Response:
        """The saved revision: whole if the caller may read documents, else which it is (the same
        document again answers the existing revision, which another author may have written)."""
        data = RevisionSerializer(row).data if may_view(self, request) else {"name": row.name, "revision": row.revision}
        return Response(data, status=status)

    @describe(summary="A document's revisions, newest first", responses=RevisionSummarySerializer(many=True))
    @action(detail=True, methods=["get"], pagination_class=RevisionPagination)
    def revisions(self, request, name: str):
        rows = self.get_queryset().filter(name=name)
        fields = [f for f in RevisionSummarySerializer.Meta.fields if f != "version"]
        page = self.paginate_queryset(rows.only(*fields))
        if not page and "cursor" not in request.query_params and not rows.exists():
            raise exceptions.ExecutionNotFound(message=f"no workflow document {name!r}")
        return self.get_paginated_response(RevisionSummarySerializer(page, many=True).data)

    def _valid(self, serializer_class, request) -> dict:
        serializer = serializer_class(data=request.data)
        serializer.is_valid(raise_exception=True)
        return serializer.validated_data
