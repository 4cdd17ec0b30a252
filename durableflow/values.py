"""Durable values and recorded errors.

A durable value is JSON data: ``None``, ``bool``, ``int``, finite ``float``, ``str``,
``list`` and ``dict`` with ``str`` keys. It is stored as canonical JSON (sorted keys,
no whitespace) and every reader gets the *decoded* value, so that the first run of a step
and every replay of it see the same thing.
"""

from __future__ import annotations

import json
import math
import sys
import traceback
from typing import Any

from durableflow import exceptions

__all__ = ["encode", "decode", "roundtrip", "invalid_reason", "encode_error", "decode_error"]

_SCALARS = (str, int, bool, type(None))


def invalid_reason(value: Any) -> str | None:
    """Return why ``value`` is not a durable value (with a JSON pointer), or None."""
    stack: list[tuple[Any, str]] = [(value, "")]
    while stack:
        item, pointer = stack.pop()
        kind = type(item)
        if kind in _SCALARS:
            if kind is str and "\x00" in item:
                return f"{pointer or '/'}: strings may not contain NUL characters"
            continue
        if kind is float:
            if not math.isfinite(item):
                return f"{pointer or '/'}: {item!r} is not a finite number"
        elif kind is list:
            stack.extend((v, f"{pointer}/{i}") for i, v in enumerate(item))
        elif kind is dict:
            for k, v in item.items():
                if type(k) is not str:
                    return f"{pointer or '/'}: key {k!r} is not a string"
                stack.append((v, f"{pointer}/{_escape(k)}"))
        else:
            return f"{pointer or '/'}: {kind.__name__} is not a durable value (use JSON data)"
    return None


def _escape(key: str) -> str:
    return key.replace("~", "~0").replace("/", "~1")


def encode(value: Any, *, code: str = "INVALID_STEP_VALUE", max_bytes: int | None = None) -> str:
    """Canonical JSON for ``value``; raises ``WorkflowValueError(code)`` if it is not durable."""
    reason = invalid_reason(value)
    if reason is not None:
        raise exceptions.WorkflowValueError(code, f"not a durable value at {reason}")
    text = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    if max_bytes is not None and len(text) > max_bytes and len(text.encode()) > max_bytes:
        raise exceptions.WorkflowValueError(
            "PAYLOAD_TOO_LARGE", f"the value is {len(text.encode())} bytes, over the {max_bytes} byte limit"
        )
    return text


def decode(text: str) -> Any:
    return json.loads(text)


def roundtrip(value: Any, **kwargs: Any) -> tuple[str, Any]:
    """Encode ``value`` and return ``(canonical, decoded)``."""
    text = encode(value, **kwargs)
    return text, json.loads(text)


# Recorded errors ---------------------------------------------------------------------

_TRACEBACK_LIMIT = 8000


def encode_error(exc: BaseException, *, step: str | None = None) -> dict[str, Any]:
    """A JSON description of ``exc``: enough to show it and to raise it again on replay."""
    cls = type(exc)
    data: dict[str, Any] = {
        "type": f"{cls.__module__}.{cls.__qualname__}",
        "code": getattr(exc, "code", None) or "STEP_FAILED",
        "message": _printable(getattr(exc, "message", None) or str(exc) or cls.__name__),
    }
    detail = getattr(exc, "detail", None)
    if isinstance(detail, dict) and detail and invalid_reason(detail) is None:
        data["detail"] = detail
    if step is not None:
        data["step"] = step
    if exc.__traceback__ is not None:
        tb = "".join(traceback.format_exception(cls, exc, exc.__traceback__))
        data["traceback"] = _printable(tb[-_TRACEBACK_LIMIT:])
    return data


def _printable(text: str) -> str:
    # PostgreSQL's jsonb cannot hold NUL; an error message must never make its record unwritable.
    return text.replace("\x00", "\\x00")


def decode_error(data: dict[str, Any]) -> Exception:
    """Rebuild a recorded error as the class it was, when that is safe; else ``StepError``."""
    code, message = data.get("code") or "STEP_FAILED", data.get("message") or ""
    cls = _resolve(data.get("type", ""))
    detail = data.get("detail") or {}
    if cls is not None and issubclass(cls, exceptions.DurableflowError):
        try:
            if cls is exceptions.RetryableError:
                return exceptions.RetryableError(message, code=code)
            if cls is exceptions.ExecutionFailed:
                return exceptions.ExecutionFailed(code, message, **detail)
            return cls(code, message, **detail)
        except Exception:
            cls = None
    elif cls is not None and issubclass(cls, Exception):
        try:
            error = cls(message)
            error.code = code
            return error
        except Exception:
            cls = None
    return exceptions.StepError(code, message, type=data.get("type"))


def _resolve(dotted: str) -> type | None:
    # Only modules already imported: a journal row never makes this process import code.
    parts = dotted.split(".")
    for cut in range(len(parts) - 1, 0, -1):
        module = sys.modules.get(".".join(parts[:cut]))
        if module is None:
            continue
        obj: Any = module
        for attr in parts[cut:]:
            obj = getattr(obj, attr, None)
        return obj if isinstance(obj, type) and issubclass(obj, BaseException) else None
    return None
