"""Key set pagination: every page is one index range read, however deep into the list it is.

A cursor names the last row seen by its key values (``(created_at, id)`` for executions,
``id`` for a journal) and the next page is ``WHERE keys beyond the cursor ORDER BY keys
LIMIT n``, read straight off an index whose columns are the keys: no OFFSET, no COUNT. The
first key is also bounded on its own (``created_at <= c AND (created_at < c OR id < i)``), so
that the database can start the index scan at the cursor instead of filtering from the top.

Cursors are opaque to clients (base64 of JSON) and checked like any input: a forged cursor
only moves the position. SQLite keeps timestamps as text in whatever precision wrote them
(``Now()`` writes milliseconds, Python six digits), so its cursors carry the stored text and
compare text with text, as its index does; PostgreSQL's carry the exact timestamp.
"""

from __future__ import annotations

import base64
import binascii
import json
from dataclasses import dataclass
from typing import Any

from django.db import connections, models
from django.db.models import Q, TextField, Value
from django.db.models.functions import Cast, Coalesce, Length
from django.utils.dateparse import parse_datetime
from rest_framework.exceptions import ValidationError
from rest_framework.pagination import BasePagination
from rest_framework.response import Response
from rest_framework.utils.urls import remove_query_param, replace_query_param

from durableflow import values
from durableflow.api import params

__all__ = ["KeysetPagination", "ExecutionPagination", "JournalPagination"]

_MAX_CURSOR = 1024
_MIN_INT, _MAX_INT = -(2**63), 2**63 - 1


@dataclass(frozen=True)
class Cursor:
    values: list[Any]  # one per key, as the database compares them
    backwards: bool  # a "previous" link: read towards the start of the list


class KeysetPagination(BasePagination):
    """Pages of ``{"results", "next", "previous"}`` over ``keys`` (the last key unique)."""

    keys: tuple[str, ...] = ("id",)
    # ordering parameter value -> descending; None: the list has one order.
    orderings: dict[str, bool] | None = None
    default_descending = False
    page_size = 50
    max_page_size = 500
    # A page also ends before its rows' sized_fields (JSON, as text) pass this many characters.
    page_bytes: int | None = None
    sized_fields: tuple[str, ...] = ()
    cursor_query_param = "cursor"
    page_size_query_param = "page_size"
    ordering_query_param = "ordering"

    # The query parameters this paginator reads (the views refuse any other).
    def query_params(self) -> set[str]:
        names = {self.cursor_query_param, self.page_size_query_param}
        return names | {self.ordering_query_param} if self.orderings else names

    def paginate_queryset(self, queryset, request, view=None) -> list[Any]:
        self.request = request
        self.model = queryset.model
        self.vendor = connections[queryset.db].vendor
        size = self._page_size(request)
        descending = self._descending(request)
        cursor = self._cursor(request)
        backwards = cursor.backwards if cursor else False
        order_desc = descending != backwards

        queryset = queryset.order_by(*(f"-{key}" if order_desc else key for key in self.keys))
        if cursor is not None:
            queryset = queryset.filter(self._beyond(cursor.values, order_desc))
        queryset = queryset.annotate(**self._raw_keys())
        if self.page_bytes is None:
            rows = list(queryset[: size + 1])
            more = len(rows) > size
            rows = rows[:size]
        else:
            count, more = self._fitting(queryset, size)
            rows = list(queryset[:count])
        if backwards:
            rows.reverse()
        later = more if not backwards else True
        earlier = cursor is not None if not backwards else more
        self.next_cursor = Cursor(self._position(rows[-1]), False) if rows and later else None
        self.previous_cursor = Cursor(self._position(rows[0]), True) if rows and earlier else None
        return rows

    def get_paginated_response(self, data) -> Response:
        links = {"next": self._link(self.next_cursor), "previous": self._link(self.previous_cursor)}
        return Response({"results": data, **links})

    def _fitting(self, queryset, size: int) -> tuple[int, bool]:
        """How many of the next ``size`` rows fit in ``page_bytes`` (one at least), and whether
        more follow: their sizes are read first, so that no row is loaded to be dropped."""
        sizes = [Coalesce(Length(Cast(field, TextField())), 0) for field in self.sized_fields]
        sized = queryset.annotate(page_bytes=sum(sizes[1:], sizes[0]))
        lengths = list(sized.values_list("page_bytes", flat=True)[: size + 1])
        total, count = 0, 0
        for length in lengths[:size]:
            if count and total + length > self.page_bytes:
                break
            total, count = total + length, count + 1
        return count, len(lengths) > count

    # Parameters ----------------------------------------------------------------------

    def _page_size(self, request) -> int:
        size = params.integer(request, self.page_size_query_param, low=1, high=self.max_page_size)
        return self.page_size if size is None else size

    def _descending(self, request) -> bool:
        if not self.orderings:
            return self.default_descending
        raw = request.query_params.get(self.ordering_query_param)
        if raw is None:
            return self.default_descending
        if raw not in self.orderings:
            raise ValidationError({self.ordering_query_param: [f"one of {', '.join(sorted(self.orderings))}"]})
        return self.orderings[raw]

    def _cursor(self, request) -> Cursor | None:
        raw = request.query_params.get(self.cursor_query_param)
        if raw is None:
            return None
        try:
            if len(raw) > _MAX_CURSOR:
                raise ValueError("too long")
            backwards, keyed = values.parse_json(base64.urlsafe_b64decode(raw + "=" * (-len(raw) % 4)).decode())
            if type(backwards) is not bool or not isinstance(keyed, list) or len(keyed) != len(self.keys):
                raise ValueError("malformed")
            return Cursor([self._load(key, value) for key, value in zip(self.keys, keyed, strict=True)], backwards)
        except (ValueError, TypeError, binascii.Error, UnicodeDecodeError):
            message = "not a cursor this list gave (use the next/previous links)"
            raise ValidationError({self.cursor_query_param: [message]}) from None

    # Keys ----------------------------------------------------------------------------

    def _field(self, key: str) -> models.Field:
        return self.model._meta.get_field(key)

    def _text_timestamps(self, key: str) -> bool:
        return self.vendor == "sqlite" and isinstance(self._field(key), models.DateTimeField)

    def _raw_keys(self) -> dict[str, Any]:
        return {f"keyset_{key}": Cast(key, TextField()) for key in self.keys if self._text_timestamps(key)}

    def _position(self, row: Any) -> list[Any]:
        position = []
        for key in self.keys:
            value = getattr(row, f"keyset_{key}") if self._text_timestamps(key) else getattr(row, key)
            position.append(value.isoformat() if hasattr(value, "isoformat") else value)
        return position

    def _load(self, key: str, value: Any) -> Any:
        """A cursor's value for ``key`` as the query compares it; ValueError if it cannot be one."""
        field = self._field(key)
        if isinstance(field, models.DateTimeField):
            if not isinstance(value, str) or parse_datetime(value.replace(" ", "T")) is None:
                raise ValueError("not a timestamp")
            if self._text_timestamps(key):
                return Value(value, output_field=TextField())
            moment = parse_datetime(value)
            if moment is None or moment.tzinfo is None:
                raise ValueError("not an aware timestamp")
            return moment
        if isinstance(field, (models.IntegerField, models.AutoField)):
            if type(value) is not int or not _MIN_INT <= value <= _MAX_INT:
                raise ValueError("not an integer")
            return value
        if not isinstance(value, str) or len(value) > (field.max_length or 255) or values.text_fault(value):
            raise ValueError("not a key")
        return value

    def _beyond(self, position: list[Any], descending: bool) -> Q:
        """Rows after ``position`` in the (possibly reversed) order: a lexicographic comparison."""
        op = "lt" if descending else "gt"
        after = Q(pk__in=[])
        for i, key in enumerate(self.keys):
            same = {self.keys[j]: position[j] for j in range(i)}
            after |= Q(**same, **{f"{key}__{op}": position[i]})
        if len(self.keys) == 1:
            return after
        # The index range starts at the first key's value; the OR only sorts out its ties.
        return Q(**{f"{self.keys[0]}__{op}e": position[0]}) & after

    def _link(self, cursor: Cursor | None) -> str | None:
        if cursor is None:
            return None
        url = self.request.build_absolute_uri()
        token = self.token(cursor)
        return replace_query_param(remove_query_param(url, self.cursor_query_param), self.cursor_query_param, token)

    @staticmethod
    def token(cursor: Cursor) -> str:
        return base64.urlsafe_b64encode(json.dumps([cursor.backwards, cursor.values]).encode()).decode().rstrip("=")

    def cursor_after(self, queryset, pk: Any) -> str:
        """The ``cursor`` parameter of the page that follows the row ``pk`` (benchmarks, tests)."""
        self.model, self.vendor = queryset.model, connections[queryset.db].vendor
        row = queryset.annotate(**self._raw_keys()).get(pk=pk)
        return self.token(Cursor(self._position(row), False))

    # Schema ---------------------------------------------------------------------------

    def get_paginated_response_schema(self, schema: dict[str, Any]) -> dict[str, Any]:
        link = {"type": "string", "format": "uri", "nullable": True}
        return {
            "type": "object",
            "required": ["results", "next", "previous"],
            "properties": {"results": schema, "next": link, "previous": link},
        }

    def get_schema_operation_parameters(self, view) -> list[dict[str, Any]]:
        parameters = [
            {
                "name": self.cursor_query_param,
                "in": "query",
                "required": False,
                "description": "the position to read from: take it from a page's next or previous link",
                "schema": {"type": "string"},
            },
            {
                "name": self.page_size_query_param,
                "in": "query",
                "required": False,
                "description": f"rows per page (default {self.page_size})",
                "schema": {"type": "integer", "minimum": 1, "maximum": self.max_page_size},
            },
        ]
        if self.orderings:
            parameters.append(
                {
                    "name": self.ordering_query_param,
                    "in": "query",
                    "required": False,
                    "description": "the list's order (newest first by default)",
                    "schema": {"type": "string", "enum": sorted(self.orderings)},
                }
            )
        return parameters


class ExecutionPagination(KeysetPagination):
    """Executions newest first (or oldest first), on the indexes ``(..., -created_at, -id)``."""

    keys = ("created_at", "id")
    orderings = {"-created_at": True, "created_at": False}
    default_descending = True


class JournalPagination(KeysetPagination):
    """A journal in the order its steps were recorded, on the index ``(execution, id)``; a page
    holds at most 4 MB of values and errors (a step value may be MAX_PAYLOAD_BYTES: a thousand
    of them would be a gigabyte), and one record at least."""

    keys = ("id",)
    page_size = 100
    max_page_size = 1000
    page_bytes = 4_000_000
    sized_fields = ("value", "error")
