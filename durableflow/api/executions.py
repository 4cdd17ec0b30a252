"""``executions/``: start, list, read, long-poll, journal, streams, cancel, retry, rerun, fork, signals.

The views orchestrate; ``durableflow.operations`` decides (the same verbs as the Python API,
so a refusal has the same code over HTTP as in Python). Reads of lists go through the ORM
on the alias the project's routers choose, a page at a time off an index.
"""

from __future__ import annotations

from urllib.parse import quote

from django_filters.rest_framework import DjangoFilterBackend
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter
from rest_framework.decorators import action
from rest_framework.exceptions import ValidationError
from rest_framework.response import Response

from durableflow import exceptions, operations
from durableflow.api import params, streams
from durableflow.api.base import ApiViewSet
from durableflow.api.errors import ApiError
from durableflow.api.filters import ExecutionFilter
from durableflow.api.openapi import document
from durableflow.api.pagination import ExecutionPagination, JournalPagination
from durableflow.api.permissions import may_view
from durableflow.api.renderers import JSONOnlyRenderer
from durableflow.api.serializers import (
    CancelSerializer,
    ExecutionSerializer,
    ExecutionSummarySerializer,
    ForkSerializer,
    StartSerializer,
    StepRecordSerializer,
    StrictSerializer,
    execution_or_id,
)
from durableflow.api.waits import SatisfiedSerializer, SignalSerializer
from durableflow.api.workflows import check_exposed
from durableflow.models import Execution, StepRecord

__all__ = ["ExecutionViewSet", "MAX_WAIT"]

MAX_WAIT = 30  # seconds a GET may long-poll

WAIT = OpenApiParameter(
    "wait",
    OpenApiTypes.NUMBER,
    description=f"seconds (at most {MAX_WAIT}) to wait for the execution to finish before answering",
)
JOURNAL_CURSOR = OpenApiParameter("cursor", OpenApiTypes.STR, description="take it from a page's next link")
JOURNAL_PAGE_SIZE = OpenApiParameter(
    "page_size",
    OpenApiTypes.INT,
    description=f"records per page (default {JournalPagination.page_size}, at most {JournalPagination.max_page_size}); "
    f"a page also ends before {JournalPagination.page_bytes:,} characters of values and errors (one record at least)",
)
IDEMPOTENCY_KEY = OpenApiParameter(
    "Idempotency-Key",
    OpenApiTypes.STR,
    OpenApiParameter.HEADER,
    description="a repeated start with the same key returns the first execution (200)",
)


class ExecutionViewSet(ApiViewSet):
    queryset = Execution.objects.all()
    lookup_value_regex = "[^/]+"  # ids are any text (dots included), only not a slash
    permission_model = Execution
    required_permissions = {
        "list": "view",
        "retrieve": "view",
        "journal": "view",
        "stream": "view",
        "create": "add",
        "cancel": "change",
        "retry": "change",
        "rerun": "add",
        "fork": "add",
        "signals": "change",
    }
    filter_backends = [DjangoFilterBackend]
    filterset_class = ExecutionFilter
    pagination_class = ExecutionPagination
    extra_query_params = {
        "retrieve": frozenset({"wait"}),
        "journal": frozenset({"cursor", "page_size"}),
        "stream": frozenset({"after", "wait"}),
    }
    serializer_class = ExecutionSerializer

    def get_serializer_class(self):
        return {
            "list": ExecutionSummarySerializer,
            "create": StartSerializer,
            "cancel": CancelSerializer,
            "retry": StrictSerializer,
            "rerun": StrictSerializer,
            "fork": ForkSerializer,
            "journal": StepRecordSerializer,
            "signals": SignalSerializer,
        }.get(self.action, ExecutionSerializer)

    @document(summary="Executions, newest first, a page at a time")
    def list(self, request):
        fields = ExecutionSummarySerializer.Meta.fields
        queryset = self.filter_queryset(self.get_queryset().only(*(f for f in fields if f != "parent"), "parent_id"))
        page = self.paginate_queryset(queryset)
        return self.get_paginated_response(ExecutionSummarySerializer(page, many=True).data)

    @document(
        summary="Start an execution (durableflow.start)",
        parameters=[IDEMPOTENCY_KEY],
        request=StartSerializer,
        responses={201: execution_or_id(), 200: execution_or_id()},
    )
    def create(self, request):
        data = self._valid(StartSerializer, request)
        check_exposed(data["workflow"])
        key = self._idempotency_key(request, data["idempotency_key"])
        try:
            execution, created = operations.start_execution(
                data["workflow"],
                data["params"],
                execution_id=data["execution_id"],
                idempotency_key=key,
                deadline=data["deadline"],
            )
        except exceptions.WorkflowStartError as exc:
            if exc.code != "IDEMPOTENCY_CONFLICT":
                raise
            # The engine's message names the first execution's workflow, which API_WORKFLOWS may hide.
            which = "execution id" if key is None else "idempotency key"
            message = f"this {which} started an execution of another workflow or with other params; use a new one"
            raise ApiError(409, code=exc.code, message=message) from None
        return self._created(request, execution, "", 201 if created else 200)  # 200: an idempotent repeat

    def _created(self, request, execution, up: str = "../../", status: int = 201) -> Response:
        """The new execution, with its URL: relative to the request's (``executions/`` or a verb's)."""
        location = request.build_absolute_uri(f"{up}{quote(execution.id, safe='')}/")
        return self._shown(request, execution, status, headers={"Location": location})

    def _shown(self, request, execution, status: int = 200, **kwargs) -> Response:
        """An execution the caller acted on: whole if they may read executions, else its id only
        (a rerun, a fork or an idempotent repeat would otherwise show another run's params)."""
        data = ExecutionSerializer(execution).data if may_view(self, request) else {"id": execution.id}
        return Response(data, status=status, **kwargs)

    @document(summary="One execution; ?wait= long-polls until it finishes", parameters=[WAIT])
    def retrieve(self, request, pk: str):
        wait = self._wait(request)
        execution = operations.wait_finished(pk, wait) if wait else operations.get(pk)
        return Response(ExecutionSerializer(execution).data)

    @document(
        summary="The journal: step records in the order they were recorded",
        parameters=[JOURNAL_CURSOR, JOURNAL_PAGE_SIZE],
        responses=StepRecordSerializer(many=True),
    )
    @action(detail=True, methods=["get"], pagination_class=JournalPagination, filter_backends=[])
    def journal(self, request, pk: str):
        execution = operations.get(pk)  # 404 for an unknown id, before any page is read
        records = StepRecord.objects.filter(execution_id=execution.pk).only(*StepRecordSerializer.Meta.fields, "id")
        page = self.paginate_queryset(records)
        return self.get_paginated_response(StepRecordSerializer(page, many=True).data)

    @document(
        summary="A stream's chunks after ?after= (JSON); as Server-Sent Events with Accept: text/event-stream",
        description=streams.DESCRIPTION,
        parameters=streams.PARAMETERS,
        responses={
            (200, "application/json"): streams.StreamPageSerializer,
            (200, "text/event-stream"): OpenApiTypes.STR,
        },
    )
    @action(
        detail=True,
        methods=["get"],
        url_path=r"streams/(?P<stream_id>[^/]+)",
        renderer_classes=[JSONOnlyRenderer, streams.EventStreamRenderer],
        pagination_class=None,
        filter_backends=[],
    )
    def stream(self, request, pk: str, stream_id: str):
        sse = isinstance(request.accepted_renderer, streams.EventStreamRenderer)
        after = streams.after_of(request, sse=sse)
        if not sse:
            return Response(streams.page(pk, stream_id, after, self._wait(request)))
        if "wait" in request.query_params:
            raise ValidationError({"wait": ["an event stream waits by itself; leave wait out"]})
        streams.page(pk, stream_id, after, 0)  # 404 for an unknown execution, 400 for a bad stream id: before it starts
        return streams.event_stream(pk, stream_id, after)

    @document(summary="Cancel an unfinished execution", request=CancelSerializer, responses=execution_or_id())
    @action(detail=True, methods=["post"])
    def cancel(self, request, pk: str):
        data = self._valid(CancelSerializer, request)
        return self._shown(request, operations.cancel(pk, data["reason"]))

    @document(summary="Resume a failed execution from the step that failed it", request=None,
                   responses=execution_or_id())  # fmt: skip
    @action(detail=True, methods=["post"])
    def retry(self, request, pk: str):
        self._valid(StrictSerializer, request)  # no fields: refuse any rather than ignore them
        return self._shown(request, operations.retry(pk))

    @document(summary="Start a new execution with a finished one's workflow and params (durableflow.rerun)",
              request=None, responses={201: execution_or_id()})  # fmt: skip
    @action(detail=True, methods=["post"])
    def rerun(self, request, pk: str):
        self._valid(StrictSerializer, request)
        check_exposed(operations.get(pk).workflow, named=False)  # it starts that workflow again
        return self._created(request, operations.rerun(pk))

    @document(summary="Start a new execution keeping a finished one's journal before a step (durableflow.fork)",
              request=ForkSerializer, responses={201: execution_or_id()})  # fmt: skip
    @action(detail=True, methods=["post"])
    def fork(self, request, pk: str):
        data = self._valid(ForkSerializer, request)
        check_exposed(operations.get(pk).workflow, named=False)
        return self._created(request, operations.fork(pk, from_step=data["from_step"]))

    @document(summary="Send a signal to an unfinished execution (durableflow.signal)", request=SignalSerializer,
              responses={200: SatisfiedSerializer})  # fmt: skip
    @action(detail=True, methods=["post"])
    def signals(self, request, pk: str):
        data = self._valid(SignalSerializer, request)
        return Response({"satisfied": operations.signal(pk, data["name"], data["payload"])})

    # Input ---------------------------------------------------------------------------

    def _valid(self, serializer_class, request) -> dict:
        serializer = serializer_class(data=request.data)
        serializer.is_valid(raise_exception=True)
        return serializer.validated_data

    def _idempotency_key(self, request, field: str | None) -> str | None:
        header = request.headers.get("Idempotency-Key")
        if header is not None and field is not None and header != field:
            raise ValidationError({"idempotency_key": ["differs from the Idempotency-Key header; send one of them"]})
        return field if field is not None else header

    def _wait(self, request) -> float:
        return params.seconds(request, "wait", high=MAX_WAIT) or 0.0
