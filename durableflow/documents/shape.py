"""Members of a document's objects: the ones each object takes, the ones it needs."""

from __future__ import annotations

from typing import Any

from durableflow import exceptions, values
from durableflow.documents.pointers import escape

__all__ = ["only", "required", "storable", "check_name", "MAX_NAME"]

MAX_NAME = 200  # state and node names, event types (as the engine's), task names and versions


def only(obj: dict, allowed: frozenset[str], pointer: str) -> None:
    """``UNKNOWN_MEMBER`` at the first member (in document order) that ``allowed`` lacks."""
    if obj.keys() <= allowed:
        return
    unknown = next(key for key in obj if key not in allowed)
    if type(unknown) is not str:
        raise exceptions.DocumentError("DOCUMENT_NOT_JSON", f"a key {unknown!r} that is not a string", pointer=pointer)
    raise exceptions.DocumentError(
        "UNKNOWN_MEMBER",
        f"unknown member {unknown[:200]!r} (this object takes: {', '.join(sorted(allowed))})",
        pointer=f"{pointer}/{escape(unknown)}",
    )


def required(obj: dict, member: str, pointer: str) -> Any:
    """``obj[member]``, or ``MISSING_MEMBER`` at where it should be (null counts as missing)."""
    value = obj.get(member)
    if value is None:
        raise exceptions.DocumentError("MISSING_MEMBER", f"{member} is required here", pointer=f"{pointer}/{member}")
    return value


def storable(text: str, pointer: str) -> str:
    """``text``, or ``DOCUMENT_NOT_JSON`` if no database could store it (NUL, lone surrogates)."""
    if "\x00" in text or not text.isascii() and values.text_fault(text):
        raise exceptions.DocumentError("DOCUMENT_NOT_JSON", f"not storable text: {values.text_fault(text)}",
                                       pointer=pointer)  # fmt: skip
    return text


def check_name(name: object, pointer: str) -> str:
    """A state or node name (a key of ``pointer``'s object); its escaped pointer segment."""
    if type(name) is not str:
        raise exceptions.DocumentError("DOCUMENT_NOT_JSON", f"a key {name!r} that is not a string", pointer=pointer)
    segment = escape(name)
    if not name or len(name) > MAX_NAME:
        raise exceptions.DocumentError(
            "INVALID_STATE_NAME", f"a name has 1 to {MAX_NAME} characters", pointer=f"{pointer}/{segment}"
        )
    return storable(segment, f"{pointer}/{segment}")
