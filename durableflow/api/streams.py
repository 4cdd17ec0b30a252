"""``GET executions/{id}/streams/{stream_id}/``: a run's stream, as JSON pages or Server-Sent Events.

JSON (the default): ``{"chunks": [{"seq", "chunk", "at"}], "done"}``, the chunks after ``?after=``
(at most ``READ_LIMIT``); ``?wait=`` seconds long-polls until there is one or the run finished.

``Accept: text/event-stream``: one ``chunk`` event per chunk (``id:`` its seq, ``data:`` the
chunk as JSON), then a ``done`` event once the run is finished and every chunk was sent. A
response lasts at most ``SSE_SECONDS`` (a stream can outlive any worker's patience: a
response must not hold a sync worker for good) and starts with ``retry:``, so that the
client's ``EventSource`` reconnects at once with ``Last-Event-ID``, which resumes after that
chunk (it wins over ``?after=``, which the reconnect repeats). Each wait on the database is
woken by the chunk's notification on PostgreSQL (``durableflow.streams.read``). Comments
(``: waiting``) keep proxies from closing a quiet response.
"""

from __future__ import annotations

import json
import time
from typing import Any, Iterator

from django.db import connections
from django.http import StreamingHttpResponse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter
from rest_framework import renderers, serializers
from rest_framework.exceptions import ValidationError

from durableflow import streams
from durableflow.api import params
from durableflow.api.serializers import DurableValueField
from durableflow.engine.streams import READ_LIMIT
from durableflow.orm import backend, db_alias

__all__ = [
    "EventStreamRenderer",
    "StreamPageSerializer",
    "SSE_SECONDS",
    "RETRY_MS",
    "PARAMETERS",
    "DESCRIPTION",
    "after_of",
    "page",
    "event_stream",
]

SSE_SECONDS = 25.0  # one event-stream response, at most; the client reconnects after it
RETRY_MS = 500  # what ``retry:`` tells the client to wait before it reconnects
MAX_SEQ = 2**31 - 1  # StreamChunk.seq's column
_WAIT_SLICE = 5.0  # seconds a response waits before it sends a comment

DESCRIPTION = (
    "Permission: `durableflow.view_execution` (Django model permissions; a superuser holds all).\n\n"
    "JSON: the chunks after `after` in order (at most "
    f"{READ_LIMIT:,} a page), and `done` once the run is finished and none is left after them. "
    "`wait` long-polls for the next chunk.\n\n"
    "`Accept: text/event-stream`: Server-Sent Events. The response opens with `retry:`; each chunk is an event "
    "`chunk` with `id:` its seq and `data:` `{\"seq\", \"chunk\", \"at\"}` as JSON; an event `done` ends the "
    "stream once the run is finished and every chunk was sent. A response ends after about "
    f"{SSE_SECONDS:g} seconds without `done`: reconnect (EventSource does, sending `Last-Event-ID`, which resumes "
    "after that chunk). Lines starting with `:` are comments sent while nothing happens."
)

PARAMETERS = [
    OpenApiParameter("after", OpenApiTypes.INT, description="the chunks after this seq (default 0: from the first)"),
    OpenApiParameter(
        "wait",
        OpenApiTypes.NUMBER,
        description="JSON only: seconds (at most 30) to wait for a chunk after `after` or the run's end before answering",
    ),
    OpenApiParameter(
        "Last-Event-ID",
        OpenApiTypes.INT,
        OpenApiParameter.HEADER,
        description="Server-Sent Events: the seq of the last chunk received (what EventSource sends when it "
        "reconnects); resumes after it, whatever `after` says",
    ),
]


class EventStreamRenderer(renderers.BaseRenderer):
    """``text/event-stream``: what content negotiation picks; the view answers with its own
    streaming response (and an error, before the stream starts, as JSON: ``ApiViewMixin``)."""

    media_type = "text/event-stream"
    format = "sse"
    charset = "utf-8"

    def render(self, data: Any, accepted_media_type: str | None = None, renderer_context: Any = None) -> bytes:
        raise TypeError("an event stream is the view's own streaming response")  # pragma: no cover


class ChunkSerializer(serializers.Serializer):
    seq = serializers.IntegerField(read_only=True, help_text="1, 2, ... in the order the run wrote them")
    chunk = DurableValueField(read_only=True)
    at = serializers.DateTimeField(read_only=True, help_text="when it was stored")


class StreamPageSerializer(serializers.Serializer):
    """A page of a stream."""

    chunks = ChunkSerializer(many=True, read_only=True)
    done = serializers.BooleanField(
        read_only=True, help_text="the run is finished and no chunk is left after these: read no more"
    )


def after_of(request, *, sse: bool) -> int:
    """Where to resume: ``Last-Event-ID`` (event streams), else ``?after=``, else 0."""
    after = params.integer(request, "after", low=0, high=MAX_SEQ) or 0
    header = request.headers.get("Last-Event-ID") if sse else None
    if header is not None:
        if not (0 < len(header) <= len(str(MAX_SEQ)) and header.isascii() and header.isdigit()) or int(header) > MAX_SEQ:
            raise ValidationError({"Last-Event-ID": [f"the seq of a chunk: an integer from 0 to {MAX_SEQ}"]})
        after = int(header)
    return after


def page(execution_id: str, stream_id: str, after: int, wait: float) -> dict[str, Any]:
    return StreamPageSerializer(streams.read(execution_id, stream_id, after=after, wait=wait or None)).data


def event_stream(execution_id: str, stream_id: str, after: int) -> StreamingHttpResponse:
    """The streaming response (the execution and the stream id were checked by a first read)."""
    response = StreamingHttpResponse(_events(execution_id, stream_id, after), content_type="text/event-stream")
    response["Cache-Control"] = "no-cache"
    response["X-Accel-Buffering"] = "no"  # nginx: pass each event on as it comes
    return response


def _events(execution_id: str, stream_id: str, after: int) -> Iterator[bytes]:
    deadline = time.monotonic() + SSE_SECONDS
    yield f"retry: {RETRY_MS}\n\n".encode()
    # The request's connection is closed (Django's request_finished closes what the reads
    # open again, when the response ends): the waits below then hold none (``waiting.until``).
    connection = connections[db_alias()]
    if not backend.in_transaction(connection):
        connection.close()
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return  # the client reconnects, with Last-Event-ID
        read = streams.read(execution_id, stream_id, after=after, wait=min(remaining, _WAIT_SLICE))
        for chunk in StreamPageSerializer(read).data["chunks"]:
            after = chunk["seq"]
            yield f"id: {after}\nevent: chunk\ndata: {_json(chunk)}\n\n".encode()
        if read["done"]:
            yield b"event: done\ndata: {}\n\n"
            return
        if not read["chunks"]:
            yield b": waiting\n\n"


def _json(data: Any) -> str:
    # One line (no newline can end the event early), ASCII as the JSON answers are.
    return json.dumps(data, separators=(",", ":"), ensure_ascii=True)
