"""Durable values and recorded errors.

A durable value is JSON data: ``None``, ``bool``, ``int``, finite ``float``, ``str``,
``list`` and ``dict`` with ``str`` keys. It is stored as canonical JSON (sorted keys,
no whitespace) and every reader gets the *decoded* value, so that the first run of a step
and every replay of it see the same thing.

The codec is the one verdict for every backend: what it accepts, SQLite and PostgreSQL
both store and give back unchanged, and what either would refuse it refuses first, with
the JSON pointer of the offender. So a value that starts on SQLite starts on PostgreSQL,
and a refusal never reaches the database:

- strings and keys with NUL (``jsonb`` cannot hold it) or lone surrogates (U+D800-U+DFFF:
  not UTF-8, so no driver can send them);
- nesting deeper than ``MAX_DEPTH`` (``json.dumps`` and the databases' parsers recurse);
- integers outside the signed 64-bit range (JSON readers that use doubles, and SQLite's
  JSON functions, do not keep them exactly);
- floats of magnitude 1e16 or more (written with an exponent, PostgreSQL's ``jsonb`` keeps
  them as exact decimals and gives them back as integers: ``1e300`` becomes ``10**300``);
- NaN and the infinities, and anything that is not JSON data.
"""

from __future__ import annotations

import gc
import json
import math
import re
import sys
import traceback
from contextlib import contextmanager
from typing import Any, Iterator

from durableflow import exceptions

__all__ = [
    "encode",
    "decode",
    "parse_json",
    "cycle_collection_paused",
    "roundtrip",
    "invalid_reason",
    "text_fault",
    "encode_error",
    "decode_error",
    "MAX_DEPTH",
]

MAX_DEPTH = 512
_MIN_INT, _MAX_INT = -(2**63), 2**63 - 1
_MAX_FLOAT = 1e16  # from here on repr() writes an exponent, and jsonb reads it back as an integer


def invalid_reason(value: Any) -> str | None:
    """Return why ``value`` is not a durable value (``"<JSON pointer>: <why>"``), or None."""
    fault = _first_fault(value)
    return None if fault is None else f"{fault[0]}: {fault[1]}"


def _first_fault(value: Any) -> tuple[str, str] | None:
    """``(pointer, why)`` of the first offender in document order, or None.

    Iterative, so that no depth of nesting can raise ``RecursionError``; pointers are built
    only for the offender, so that a valid value costs a type check per item.
    """
    isfinite = math.isfinite
    stack: list[Any] = [iter(((None, value),))]  # one (key, item) iterator per open container
    path: list[Any] = []  # the keys under which the open containers were entered
    while stack:
        for key, item in stack[-1]:
            kind = type(item)
            if kind is str:
                # isascii() is O(1): only a non-ASCII string can hold a surrogate.
                if "\x00" in item or not item.isascii() and _surrogate_at(item) is not None:
                    return _pointer(path, key), _string_fault("the string", item)
            elif kind is int:
                if not _MIN_INT <= item <= _MAX_INT:
                    return _pointer(path, key), _int_fault(item)
            elif kind is float:
                if not isfinite(item):
                    return _pointer(path, key), f"{item!r} is not a finite number"
                if not -_MAX_FLOAT < item < _MAX_FLOAT:
                    return _pointer(path, key), (
                        f"{item!r}: floats of magnitude 1e16 or more come back from PostgreSQL as "
                        "integers (send them as strings, or as integers within 64 bits)"
                    )
            elif kind is dict or kind is list:
                if len(path) >= MAX_DEPTH:
                    return _pointer(path, key), f"nesting deeper than {MAX_DEPTH} levels"
                if not item:
                    continue  # nothing to enter: a body of 300,000 empty lists is walked 6x faster
                if kind is dict:
                    why = _keys_fault(item)
                    if why is not None:
                        return _pointer(path, key), why
                    stack.append(iter(item.items()))
                else:
                    stack.append(iter(enumerate(item)))
                path.append(key)
                break  # into the container; its parent's iterator resumes after it
            elif item is not None and kind is not bool:
                return _pointer(path, key), f"{kind.__name__} is not a durable value (use JSON data)"
        else:
            stack.pop()
            if path:
                path.pop()
    return None


def text_fault(text: str) -> str | None:
    """Why ``text`` (an id, a key) cannot be stored, or None: NUL and lone surrogates."""
    if "\x00" in text or not text.isascii() and _surrogate_at(text) is not None:
        return _string_fault("it", text)
    return None


def _keys_fault(mapping: dict) -> str | None:
    for key in mapping:
        if type(key) is not str:
            return f"key {_show(key)} is not a string"
        if "\x00" in key or not key.isascii() and _surrogate_at(key) is not None:
            return _string_fault(f"key {_show(key)}", key)
    return None


def _surrogate_at(text: str) -> int | None:
    # Encoding fails exactly on U+D800-U+DFFF, and is several times faster than a regex scan.
    try:
        text.encode()
    except UnicodeEncodeError as exc:
        return exc.start
    return None


def _string_fault(what: str, text: str) -> str:
    nul = text.find("\x00")
    surrogate = _surrogate_at(text)
    if surrogate is not None and (nul < 0 or surrogate < nul):
        return (
            f"{what} holds a lone surrogate (U+{ord(text[surrogate]):04X} at index {surrogate}), "
            "which is not valid UTF-8 and cannot be stored"
        )
    return f"{what} holds a NUL character (at index {nul}), which PostgreSQL cannot store"


def _int_fault(number: int) -> str:
    shown = str(number) if number.bit_length() <= 256 else f"an integer of {number.bit_length()} bits"
    return (
        f"{shown} is outside the signed 64-bit range (-2**63 to 2**63-1); larger integers do not "
        "survive every JSON reader or SQLite's JSON functions (send them as strings)"
    )


def _show(key: Any, limit: int = 60) -> str:
    try:
        text = repr(key)  # escapes NUL and surrogates, so the message itself can be stored
    except Exception:  # noqa: BLE001 - a broken __repr__ must not hide the message
        text = f"<{type(key).__name__}>"
    return text if len(text) <= limit else f"{text[: limit - 5]}...{text[-2:]}"


def _pointer(path: list[Any], key: Any) -> str:
    # path[0] is the key of the root, which a pointer does not name; "/" stands for the root.
    parts = [*path[1:], key] if path else []
    return "".join(f"/{_escape(str(part))}" for part in parts) or "/"


def _escape(key: str) -> str:
    return key.replace("~", "~0").replace("/", "~1")


def encode(value: Any, *, code: str = "INVALID_STEP_VALUE", max_bytes: int | None = None) -> str:
    """Canonical JSON for ``value``; raises ``WorkflowValueError(code)`` if it is not durable.

    The error's ``detail["path"]`` is the JSON pointer of the offender.
    """
    fault = _first_fault(value)
    if fault is not None:
        pointer, why = fault
        raise exceptions.WorkflowValueError(code, f"not a durable value at {pointer}: {why}", path=pointer)
    text = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    # len() counts characters, never more than the bytes: most values are sized without encoding.
    if max_bytes is not None and len(text) > max_bytes and len(text.encode()) > max_bytes:
        raise exceptions.WorkflowValueError(
            "PAYLOAD_TOO_LARGE", f"the value is {len(text.encode())} bytes, over the {max_bytes} byte limit"
        )
    return text


def decode(text: str) -> Any:
    return json.loads(text)


def parse_json(text: str) -> Any:
    """JSON text typed or sent by someone (a request body, an admin form) as Python data.

    RFC 8259 only (``NaN`` and ``Infinity`` are not JSON), in time linear in the text's length
    whatever it holds: the standard library's C decoder, with nothing scanned beforehand. Its
    own recursion guard stops a nesting deeper than Python's recursion limit allows; shallower
    nesting past ``MAX_DEPTH`` is parsed, so that ``encode`` refuses it with the JSON pointer
    of the offender, as for a value made in Python. Raises ``ValueError`` with a message that
    quotes nothing of the text.
    """
    try:
        with cycle_collection_paused():
            return json.loads(text, parse_constant=_refuse_constant)
    except RecursionError:
        raise ValueError(f"it nests deeper than a durable value may ({MAX_DEPTH} levels)") from None
    except json.JSONDecodeError as exc:
        raise ValueError(f"{exc.msg} at line {exc.lineno} column {exc.colno}") from None
    except ValueError as exc:
        if str(exc).startswith("Exceeds the limit"):  # int() of a literal past sys.int_info's digit limit
            raise ValueError(f"an integer has more than {sys.get_int_max_str_digits()} digits") from None
        raise


@contextmanager
def cycle_collection_paused() -> Iterator[None]:
    """Hold off the cyclic garbage collector while a large value is built (parsed, compiled).

    A body of 300,000 small lists, or a 10,000-state document, allocates enough containers
    to set off full collections, each a walk over every object the process holds: in a
    loaded Django process that tripled or quadrupled the time, at random. Building JSON data
    makes no reference cycles, so reference counting frees all it drops meanwhile.
    """
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON (RFC 8259 has no NaN or Infinity)")


def roundtrip(value: Any, **kwargs: Any) -> tuple[str, Any]:
    """Encode ``value`` and return ``(canonical, decoded)``."""
    text = encode(value, **kwargs)
    return text, json.loads(text)


# Recorded errors ---------------------------------------------------------------------

_TRACEBACK_LIMIT = 8000
_MESSAGE_LIMIT = 100_000
_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")


def encode_error(exc: BaseException, *, step: str | None = None) -> dict[str, Any]:
    """A JSON description of ``exc``: enough to show it and to raise it again on replay.

    Every string in it can be stored by every backend (NUL and lone surrogates are written
    as escapes), so recording a failure cannot fail in turn.
    """
    cls = type(exc)
    data: dict[str, Any] = {
        "type": _printable(f"{cls.__module__}.{cls.__qualname__}"),
        "code": _code(getattr(exc, "code", None)),
        "message": _printable(_message(exc)[:_MESSAGE_LIMIT]),
    }
    detail = getattr(exc, "detail", None)
    if isinstance(detail, dict) and detail and invalid_reason(detail) is None:
        data["detail"] = detail
    if step is not None:
        data["step"] = _printable(step)
    if exc.__traceback__ is not None:
        tb = "".join(traceback.format_exception(cls, exc, exc.__traceback__))
        data["traceback"] = _printable(tb[-_TRACEBACK_LIMIT:])
    return data


def _code(code: Any) -> str:
    if isinstance(code, str):
        return _printable(str.__str__(code)) or "STEP_FAILED"  # a plain str, also from a str enum
    if type(code) is int and _MIN_INT <= code <= _MAX_INT:
        return str(code)  # an HTTP status, say
    return "STEP_FAILED"  # no code, or an attribute that is not one (grpc's code() method)


def _message(exc: BaseException) -> str:
    try:
        message = getattr(exc, "message", None)
        if not isinstance(message, str) or not message:
            message = str(exc)
    except Exception:  # noqa: BLE001 - a broken __str__ must not keep the failure from being recorded
        message = ""
    return message or type(exc).__name__


def _printable(text: str) -> str:
    # PostgreSQL's jsonb cannot hold NUL, and no driver can send a lone surrogate: a message
    # must never make its record unwritable.
    if "\x00" not in text and (text.isascii() or _surrogate_at(text) is None):
        return text
    return _UNSTORABLE.sub(_escaped, text)


def _escaped(match: re.Match[str]) -> str:
    char = match.group()
    return "\\x00" if char == "\x00" else f"\\u{ord(char):04x}"


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
        except Exception:  # noqa: BLE001 - a class not rebuilt so: a StepError instead
            cls = None
    elif cls is not None and issubclass(cls, Exception):
        try:
            error = cls(message)
            error.code = code  # type: ignore[attr-defined]  # whatever class it is, it carries its code
            return error
        except Exception:  # noqa: BLE001 - a class not rebuilt so: a StepError instead
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
