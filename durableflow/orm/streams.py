"""The ORM storage's streams: ``StreamChunk`` rows.

A chunk's insert is one statement that fences and records (inserted only while the lease is
the writer's, and once per (execution, stream, seq): the unique constraint decides, not a
pre-check). On PostgreSQL a trigger (migration ``0018_streams``) notifies
``durableflow_stream`` with the execution id as each chunk commits, which wakes readers
(``durableflow.orm.waiting``).
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from django.db.models import Max

from durableflow.models import StreamChunk
from durableflow.orm.core import OrmCore
from durableflow.orm.sql import fenced_insert

__all__ = ["OrmStreams"]


class OrmStreams(OrmCore):
    """Stream chunks on the models (a part of ``OrmStorage``)."""

    def _chunks(self):
        return StreamChunk.objects.using(self.alias)

    def write_chunk(self, execution_id: str, token: str, stream_id: str, seq: int, chunk: Any, at: datetime) -> bool:
        _, cursor = self._sql()  # the storage's (prepared, on PostgreSQL) cursor
        connection = self.connection
        params = {
            "execution_id": execution_id,
            "token": token,
            "stream_id": stream_id,
            "seq": seq,
            "chunk": json.dumps(chunk, separators=(",", ":"), ensure_ascii=False),
            "at": connection.ops.adapt_datetimefield_value(at),
        }
        cursor.execute(fenced_insert(connection, StreamChunk, _FIELDS, _CASTS, _UNIQUE), params)
        return cursor.rowcount == 1

    def last_chunk(self, execution_id: str, stream_id: str) -> int:
        rows = self._chunks().filter(execution_id=execution_id, stream_id=stream_id)
        return rows.aggregate(last=Max("seq"))["last"] or 0

    def chunks(self, execution_id: str, stream_id: str, after: int, limit: int) -> list[StreamChunk]:
        rows = self._chunks().filter(execution_id=execution_id, stream_id=stream_id, seq__gt=after)
        return list(rows.order_by("seq").only("seq", "chunk", "at")[:limit])

    def stream_ids(self, execution_id: str) -> dict[str, int]:
        rows = self._chunks().filter(execution_id=execution_id).order_by().values("stream_id")
        return {row["stream_id"]: row["last"] for row in rows.annotate(last=Max("seq"))}


_FIELDS = ("execution_id", "stream_id", "seq", "chunk", "at")
_UNIQUE = ("execution_id", "stream_id", "seq")
_CASTS = {"seq": "::integer", "chunk": "::jsonb", "at": "::timestamptz"}
