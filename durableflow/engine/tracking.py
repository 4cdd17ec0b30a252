"""What a store selector read, and whether a change touched it.

A selector runs against a read-only *tracking proxy* of the state: every lookup records the
path it read (``["items", 0]``, ``["ready"]``) and how much of the value there it saw:

- ``value``: the whole value (a scalar read, ``==``, ``in`` on a list, a returned subtree);
- ``shape``: only a container's keys or length (``len``, ``bool``, iteration, ``keys()``);
- ``type``: only whether the path exists and what kind of value is there (a container the
  selector stepped through, ``key in dict``).

A waiter keeps these reads; a committed change wakes it only if one of them differs between
the old and the new state (``touched``). A selector that tries to change the state raises
``WorkflowValueError("STORE_READ_ONLY")``: selectors read, updaters change (on a *draft*, a
plain copy of the state).
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping, Sequence
from typing import Any, Callable, Iterable, Iterator

from durableflow import exceptions

__all__ = ["Reads", "track", "unwrap", "draft", "touched", "require_sync", "check_result", "MISSING"]

VALUE, SHAPE, TYPE = "value", "shape", "type"
_STRENGTH = {TYPE: 1, SHAPE: 2, VALUE: 3}


class _Missing:
    def __repr__(self) -> str:
        return "MISSING"


MISSING: Any = _Missing()


class Reads:
    """The reads of one selector run: the strongest read per path."""

    def __init__(self) -> None:
        self._reads: dict[tuple, str] = {}

    def add(self, path: tuple, read: str) -> None:
        current = self._reads.get(path)
        if current is None or _STRENGTH[read] > _STRENGTH[current]:
            self._reads[path] = read

    def as_list(self) -> list[dict[str, Any]]:
        """The reads as durable data, without those a whole-value read above them covers."""
        whole = [path for path, read in self._reads.items() if read == VALUE]
        kept = [
            {"path": list(path), "read": read}
            for path, read in self._reads.items()
            if not any(len(w) < len(path) and path[: len(w)] == w for w in whole)
        ]
        return sorted(kept, key=lambda r: ([str(p) for p in r["path"]], r["read"]))


def _refuse(*args: Any, **kwargs: Any) -> None:
    raise exceptions.WorkflowValueError(
        "STORE_READ_ONLY",
        "a store selector tried to change the state it reads; selectors only read. "
        "Change the state in an updater (update, update_from) or in take's claim.",
    )


class _Tracked:
    __slots__ = ("_data", "_path", "_reads")

    def __init__(self, data: Any, path: tuple, reads: Reads) -> None:
        self._data, self._path, self._reads = data, path, reads

    def _child(self, key: Any, value: Any) -> Any:
        path = (*self._path, key)
        if isinstance(value, (dict, list)):
            self._reads.add(path, TYPE)
            return (TrackedDict if isinstance(value, dict) else TrackedList)(value, path, self._reads)
        self._reads.add(path, VALUE)
        return value

    def _whole(self) -> Any:
        self._reads.add(self._path, VALUE)
        return _copy(self._data)

    def __eq__(self, other: Any) -> bool:
        return self._whole() == unwrap(other)

    def __ne__(self, other: Any) -> bool:
        return not self == other

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return repr(self._whole())

    def __copy__(self) -> Any:
        return self._whole()

    def __deepcopy__(self, memo: Any) -> Any:
        return self._whole()

    # Every way a dict or list changes itself.
    __setitem__ = __delitem__ = __iadd__ = __imul__ = _refuse
    append = extend = insert = pop = remove = clear = sort = reverse = _refuse
    update = setdefault = popitem = _refuse


class TrackedDict(_Tracked, Mapping):
    """A read-only view of a dict in the state that records what is read."""

    __slots__ = ()

    def __getitem__(self, key: Any) -> Any:
        if key not in self._data:
            self._reads.add((*self._path, key), TYPE)
            raise KeyError(key)
        return self._child(key, self._data[key])

    def get(self, key: Any, default: Any = None) -> Any:
        return self[key] if key in self else default

    def __contains__(self, key: Any) -> bool:
        self._reads.add((*self._path, key), TYPE)
        return key in self._data

    def __len__(self) -> int:
        self._reads.add(self._path, SHAPE)
        return len(self._data)

    def __iter__(self) -> Iterator[str]:
        self._reads.add(self._path, SHAPE)
        return iter(list(self._data))


class TrackedList(_Tracked, Sequence):
    """A read-only view of a list in the state that records what is read."""

    __slots__ = ()

    def __getitem__(self, index: Any) -> Any:
        if isinstance(index, slice):
            self._reads.add(self._path, SHAPE)
            return [self._child(i, self._data[i]) for i in range(len(self._data))[index]]
        if not isinstance(index, int) or isinstance(index, bool):
            raise TypeError(f"list indices must be integers, not {type(index).__name__}")
        if index < 0 or index >= len(self._data):
            self._reads.add(self._path, SHAPE)  # which item it is (or whether any) depends on the length
        if index < -len(self._data) or index >= len(self._data):
            raise IndexError("list index out of range")
        position = index % len(self._data)
        return self._child(position, self._data[position])

    def __len__(self) -> int:
        self._reads.add(self._path, SHAPE)
        return len(self._data)

    def __iter__(self) -> Iterator[Any]:
        self._reads.add(self._path, SHAPE)
        for position, value in enumerate(list(self._data)):
            yield self._child(position, value)

    def __contains__(self, value: Any) -> bool:
        return unwrap(value) in self._whole()

    def index(self, value: Any, *args: Any) -> int:
        return self._whole().index(unwrap(value), *args)

    def count(self, value: Any) -> int:
        return self._whole().count(unwrap(value))

    def __add__(self, other: Any) -> list:
        return self._whole() + unwrap(other)

    def __radd__(self, other: Any) -> list:
        return unwrap(other) + self._whole()


def track(state: Any, reads: Reads) -> Any:
    """The state as a selector sees it: a tracking proxy (a scalar state as it is)."""
    if isinstance(state, dict):
        return TrackedDict(state, (), reads)
    if isinstance(state, list):
        return TrackedList(state, (), reads)
    reads.add((), VALUE)
    return state


def unwrap(value: Any) -> Any:
    """Plain data from a selector's result: a proxy in it becomes a copy (a whole-value read)."""
    if isinstance(value, _Tracked):
        return value._whole()
    if isinstance(value, dict):
        return {key: unwrap(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(unwrap(item) for item in value)
    return value


def _copy(value: Any) -> Any:
    if isinstance(value, dict):
        return {key: _copy(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_copy(item) for item in value]
    return value


def draft(state: Any) -> Any:
    """A plain copy of the state for an updater to change."""
    return _copy(state)


# What changed ------------------------------------------------------------------------------


def _at(state: Any, path: Iterable[Any]) -> Any:
    for key in path:
        if isinstance(state, dict) and isinstance(key, str):
            state = state.get(key, MISSING)
        elif isinstance(state, list) and isinstance(key, int) and 0 <= key < len(state):
            state = state[key]
        else:
            return MISSING
    return state


def _kind(value: Any) -> Any:
    return MISSING if value is MISSING else type(value)


def _same(a: Any, b: Any) -> bool:
    """JSON equality that tells 1, 1.0 and True apart (a change of type is a change)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_same(value, b[key]) for key, value in a.items())
    if isinstance(a, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    return a == b


def touched(old: Any, new: Any, reads: Iterable[dict[str, Any]]) -> bool:
    """Whether the change from ``old`` to ``new`` differs in anything these reads saw."""
    for entry in reads:
        before, after = _at(old, entry["path"]), _at(new, entry["path"])
        read = entry["read"]
        if _kind(before) is not _kind(after):
            return True
        if read == VALUE and not _same(before, after):
            return True
        if read == SHAPE:
            if isinstance(before, dict) and before.keys() != after.keys():
                return True
            if isinstance(before, list) and len(before) != len(after):
                return True
    return False


def require_sync(fn: Callable[..., Any], role: str) -> None:
    """Refuse a coroutine function (or anything that is not callable) as a selector or updater."""
    if not callable(fn):
        raise TypeError(f"a store {role} must be a callable, not {type(fn).__name__}")
    target = getattr(fn, "func", fn)  # functools.partial
    if inspect.iscoroutinefunction(target) or inspect.isasyncgenfunction(target):
        raise exceptions.WorkflowValueError("STORE_CALLBACK_NOT_SYNC", _not_sync(role, fn))


def check_result(result: Any, role: str, fn: Any) -> Any:
    """A callback that returned an awaitable is asynchronous after all: refuse its result."""
    if inspect.isawaitable(result):
        close = getattr(result, "close", None)
        if close is not None:
            close()
        raise exceptions.WorkflowValueError("STORE_CALLBACK_NOT_SYNC", _not_sync(role, fn))
    return result


def _not_sync(role: str, fn: Any) -> str:
    name = getattr(fn, "__qualname__", None) or type(fn).__name__
    return (
        f"store {role} {name} is asynchronous; store {role}s run inside the store's transaction "
        "and must be plain (sync) functions"
    )
