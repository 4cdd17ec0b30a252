"""The step bodies' call log of the patches and versions contracts (``call_log`` clears it)."""

from __future__ import annotations

calls: list[str] = []


def call(name: str) -> str:
    calls.append(name)
    return name
