"""The API's one parser: strict JSON, bounded in size and depth, that never raises past a 4xx.

DRF's ``JSONParser`` reads any size, accepts ``NaN``/``Infinity`` and lets a deeply nested
body raise ``RecursionError`` in the C scanner. This one:

- answers 413 ``PAYLOAD_TOO_LARGE`` for a body over ``MAX_PAYLOAD_BYTES`` plus room for the
  envelope, from ``Content-Length`` before reading, or after reading one byte too many;
- reads UTF-8 only and RFC 8259 JSON only (``NaN``, ``Infinity`` are not JSON): 400
  ``INVALID_JSON`` otherwise;
- never recurses deeper than ``MAX_BODY_DEPTH``: a container nested deeper is replaced by an
  empty list *before* parsing. Every durable value is a member of the body object, so the
  replacement still sits deeper than ``values.MAX_DEPTH`` inside it and the codec refuses it
  with the same code and JSON pointer as ``durableflow.start`` (``INVALID_PARAMS`` at
  ``/0/0/...``); anything else that deep fails the serializer. Nothing that deep is accepted.

What is valid JSON but not a durable value (NUL, lone surrogates as ``\\u`` escapes, integers
outside 64 bits) is parsed as it is, so that the codec gives the verdict, as in Python.
"""

from __future__ import annotations

import json
import re
from typing import Any

from rest_framework.exceptions import APIException, ParseError
from rest_framework.parsers import BaseParser

from durableflow import values
from durableflow.conf import df_settings

__all__ = ["StrictJSONParser", "PayloadTooLarge", "body_limit", "loads", "MAX_BODY_DEPTH"]

# A durable value may nest MAX_DEPTH levels and sits one level inside the body object.
MAX_BODY_DEPTH = values.MAX_DEPTH + 1
# Room for the body's own members (workflow, keys, ids) around a largest value.
ENVELOPE_BYTES = 64 * 1024

# A JSON string (escapes included), or one bracket. Strings are matched whole so that the
# brackets inside them are skipped.
_TOKENS = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"|[\[\]{}]', re.S)
_OPEN = frozenset("[{")


class PayloadTooLarge(APIException):
    status_code = 413
    default_code = "PAYLOAD_TOO_LARGE"
    default_detail = "the request body is too large"


def body_limit() -> int:
    """The largest body the API reads, in bytes."""
    return int(df_settings.MAX_PAYLOAD_BYTES) + ENVELOPE_BYTES


def loads(text: str) -> Any:
    """Parse strict JSON without recursing deeper than ``MAX_BODY_DEPTH``; ``ParseError`` if not JSON."""
    # Fewer opening brackets than the limit cannot nest past it: the scan is for the rest.
    if text.count("[") + text.count("{") > MAX_BODY_DEPTH:
        text = _flatten_too_deep(text)
    try:
        return json.loads(text, parse_constant=_refuse_constant)
    except ValueError as exc:  # JSONDecodeError, and int() of more than 4,300 digits
        raise ParseError(f"the body is not valid JSON: {exc}") from None
    except RecursionError:  # pragma: no cover - _flatten_too_deep bounds the depth
        raise ParseError("the body nests too deeply") from None


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON (RFC 8259 has no NaN or Infinity)")


def _flatten_too_deep(text: str) -> str:
    """``text`` with every container that opens deeper than ``MAX_BODY_DEPTH`` replaced by ``[]``.

    Iterative; strings are skipped whole. On a body that is not JSON the result is not JSON
    either (the parser then refuses it), and a replacement never makes an invalid body valid
    in a way that could be accepted: the replacement is itself too deep.
    """
    parts: list[str] = []
    depth, kept_until, cut_at = 0, 0, None
    for token in _TOKENS.finditer(text):
        char = token.group()
        if char in _OPEN:
            depth += 1
            if depth == MAX_BODY_DEPTH + 1:
                cut_at = token.start()
        elif char in "]}":
            if depth == MAX_BODY_DEPTH + 1 and cut_at is not None:
                parts.append(text[kept_until:cut_at])
                parts.append("[]")
                kept_until, cut_at = token.end(), None
            depth -= 1
    if cut_at is not None:  # unbalanced: cut to the end, and let the parser refuse what is left
        parts.append(text[kept_until:cut_at])
        parts.append("[]")
        kept_until = len(text)
    parts.append(text[kept_until:])
    return "".join(parts)


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
