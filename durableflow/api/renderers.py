"""The API answers JSON only."""

from __future__ import annotations

from rest_framework.renderers import JSONRenderer

__all__ = ["JSONOnlyRenderer"]


class JSONOnlyRenderer(JSONRenderer):
    """DRF's JSON, ASCII-escaped whatever ``UNICODE_JSON`` says: a message that quotes a refused
    input (a lone surrogate) is then still encodable, and the answer is a 4xx, not a 500."""

    ensure_ascii = True
