"""Query parameters: the one strict reading of a number (``page_size``, ``revision``, ``wait``).

``str.isdigit()`` and ``int()`` take far more than ASCII digits (``"²".isdigit()`` is true and
``int("²")`` raises, ``int("١٢")`` is 12) and ``int()`` of a 5,000-digit string raises too:
each parameter here is ASCII digits of a bounded length, checked before it is converted, and
anything else is 400 ``INVALID_REQUEST`` naming the parameter and what it takes. Text
parameters are read by django-filter's fields (``filters.py``); cursors by the paginator.
"""

from __future__ import annotations

import re
from typing import Any

from rest_framework.exceptions import ValidationError

__all__ = ["integer", "seconds"]

_SECONDS = re.compile(r"[0-9]{1,3}(?:\.[0-9]{1,6})?", re.ASCII)


def integer(request: Any, name: str, *, low: int, high: int) -> int | None:
    """``?name=`` as an integer from ``low`` to ``high``, or None when it is not given."""
    raw = request.query_params.get(name)
    if raw is None:
        return None
    if not (0 < len(raw) <= len(str(high)) and raw.isascii() and raw.isdigit()) or not low <= int(raw) <= high:
        raise ValidationError({name: [f"an integer from {low} to {high}"]})
    return int(raw)


def seconds(request: Any, name: str, *, high: int) -> float | None:
    """``?name=`` as a number of seconds from 0 to ``high`` (at most six decimals), or None."""
    raw = request.query_params.get(name)
    if raw is None:
        return None
    if not _SECONDS.fullmatch(raw) or float(raw) > high:
        raise ValidationError({name: [f"seconds from 0 to {high}"]})
    return float(raw)
