"""The API's one parser: strict JSON, bounded in size, linear in time, never past a 4xx.

DRF's ``JSONParser`` reads any size, accepts ``NaN``/``Infinity`` and lets a deeply nested
body raise ``RecursionError`` in the C scanner. This one:

- answers 413 ``PAYLOAD_TOO_LARGE`` for a body over ``MAX_PAYLOAD_BYTES`` plus room for the
  envelope, from ``Content-Length`` before reading, or after reading one byte too many;
- reads UTF-8 only and RFC 8259 JSON only (``NaN``, ``Infinity`` are not JSON): 400
  ``INVALID_JSON`` otherwise;
- parses with ``values.parse_json`` (the admin's forms use it too): the standard C decoder and
  nothing scanned before it, so that no body costs more than linear time (DRF's session
  authentication parses the body during its CSRF check, before any permission is checked).
  A body nested deeper than the decoder's recursion guard lets it go is 400 ``INVALID_JSON``;
  a value nested past ``values.MAX_DEPTH`` within it is parsed, and the codec refuses it with
  the same code and JSON pointer as ``durableflow.start`` (``INVALID_PARAMS`` at ``/0/0/...``).

What is valid JSON but not a durable value (NUL, lone surrogates as ``\\u`` escapes, integers
outside 64 bits) is parsed as it is, so that the codec gives the verdict, as in Python.
"""

from __future__ import annotations

from typing import Any

from rest_framework.exceptions import APIException, ParseError
from rest_framework.parsers import BaseParser

from durableflow import values
from durableflow.conf import df_settings

__all__ = ["StrictJSONParser", "PayloadTooLarge", "body_limit", "loads"]

# Room for the body's own members (workflow, keys, ids) around a largest value.
ENVELOPE_BYTES = 64 * 1024


class PayloadTooLarge(APIException):
    status_code = 413
    default_code = "PAYLOAD_TOO_LARGE"
    default_detail = "the request body is too large"


def body_limit() -> int:
    """The largest body the API reads, in bytes."""
    return int(df_settings.MAX_PAYLOAD_BYTES) + ENVELOPE_BYTES


def loads(text: str) -> Any:
    """Parse strict JSON in linear time; ``ParseError`` (400 ``INVALID_JSON``) if it is not JSON."""
    try:
        return values.parse_json(text)
    except ValueError as exc:
        raise ParseError(f"the body is not valid JSON: {exc}") from None


class StrictJSONParser(BaseParser):
    """``application/json`` bodies only (with any parameters), UTF-8, bounded; see the module."""

    media_type = "application/json"

    def parse(self, stream, media_type=None, parser_context=None) -> Any:
        limit = body_limit()
        request = (parser_context or {}).get("request")
        declared = _content_length(request)
        if declared is not None and declared > limit:
            raise PayloadTooLarge(f"the body is {declared} bytes, over the API's limit of {limit} bytes")
        raw = stream.read(limit + 1) if stream is not None else b""
        if len(raw) > limit:
            raise PayloadTooLarge(f"the body is over the API's limit of {limit} bytes")
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise ParseError(f"the body is not UTF-8: {exc.reason} at byte {exc.start}") from None
        return loads(text)


def _content_length(request) -> int | None:
    if request is None:
        return None
    try:
        return int(request.META.get("CONTENT_LENGTH") or 0)
    except (TypeError, ValueError):
        return None
