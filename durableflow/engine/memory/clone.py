"""Deep copies of the in-memory storage's rows, without recursion.

``copy.deepcopy`` recurses two or three frames per level, so a durable value nested 512
deep (which the codec accepts, and both databases store) exceeds Python's recursion limit.
Rows are dataclasses holding JSON data and timestamps: copied here with an explicit stack.
"""

from __future__ import annotations

import copy
import dataclasses
from datetime import date, datetime, timedelta
from typing import Any, Callable

__all__ = ["clone"]

_ATOMS = frozenset({str, int, float, bool, type(None), datetime, date, timedelta})


def clone(value: Any) -> Any:
    """A deep copy of ``value`` (dicts, lists, tuples, dataclasses, atoms), at any depth."""
    if type(value) in _ATOMS:
        return value
    box: list[Any] = [None]
    stack: list[tuple[Any, Callable[[Any], None]]] = [(value, lambda new: box.__setitem__(0, new))]
    while stack:
        source, put = stack.pop()
        kind = type(source)
        if kind in _ATOMS:
            put(source)
        elif kind is dict:
            target: Any = dict.fromkeys(source)
            put(target)
            stack.extend((item, _setter(target, key)) for key, item in source.items())
        elif kind is list:
            target = [None] * len(source)
            put(target)
            stack.extend((item, _setter(target, index)) for index, item in enumerate(source))
        elif kind is tuple:
            put(tuple(clone(item) for item in source))  # short tuples only (ids, args)
        elif dataclasses.is_dataclass(source):
            target = copy.copy(source)
            put(target)
            stack.extend((getattr(source, f.name), _attribute(target, f.name)) for f in dataclasses.fields(source))
        else:
            put(copy.deepcopy(source))
    return box[0]


def _setter(container: Any, key: Any) -> Callable[[Any], None]:
    return lambda new: container.__setitem__(key, new)


def _attribute(target: Any, name: str) -> Callable[[Any], None]:
    return lambda new: object.__setattr__(target, name, new)
