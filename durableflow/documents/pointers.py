"""JSON pointers (RFC 6901) and the paths that name a document's states."""

from __future__ import annotations

__all__ = ["escape", "join", "state_path"]


def escape(segment: str) -> str:
    """One pointer segment: ``~`` as ``~0``, ``/`` as ``~1``."""
    if "~" in segment or "/" in segment:
        return segment.replace("~", "~0").replace("/", "~1")
    return segment


def join(pointer: str, *segments: str | int) -> str:
    return pointer + "".join(f"/{escape(str(segment))}" for segment in segments)


def state_path(parent: str | None, name: str) -> str:
    """A state's name with its enclosing flows' (``"ship/pack"``): the key of ``visits`` and
    ``results``, and of its journal records."""
    return escape(name) if parent is None else f"{parent}/{escape(name)}"
