"""``@durableflow.task``: the Python callables a workflow document may run, by name and version.

A document names ``{"task": "fetch-order", "version": "1"}``; nothing else is callable from a
document (no import by dotted path), so what a document can do is what the project's code
registered. A task is ``fn(input) -> durable value``: its output becomes ``data`` for the
next state. Registering the same name under another version keeps both, so a running
execution pinned to an older document revision still finds the version it names.
"""

from __future__ import annotations

import inspect
import threading
from dataclasses import dataclass, field
from typing import Any, Callable

from durableflow.options import Retry

__all__ = ["TaskDefinition", "TaskRegistry", "tasks", "task"]

MAX_NAME = 200


@dataclass(frozen=True)
class TaskDefinition:
    name: str
    version: str
    fn: Callable[[Any], Any]
    retry: Retry | None = None
    description: str = field(default="", compare=False)

    @property
    def origin(self) -> str:
        return f"{getattr(self.fn, '__module__', '?')}.{getattr(self.fn, '__qualname__', repr(self.fn))}"


class TaskRegistry:
    """Tasks known to this process, by ``(name, version)``.

    Registration happens at import time (the ``workflows`` modules the app config discovers),
    so a lock around writes is enough: the registry is read far more often than written.
    """

    def __init__(self) -> None:
        self._tasks: dict[tuple[str, str], TaskDefinition] = {}
        self._lock = threading.Lock()

    def register(self, definition: TaskDefinition) -> None:
        key = (definition.name, definition.version)
        with self._lock:
            existing = self._tasks.get(key)
            # Re-importing the same module (autoreload, tests) registers the same origin again.
            if existing is not None and existing.origin != definition.origin:
                raise ValueError(
                    f"Task {definition.name!r} version {definition.version!r} is already registered by "
                    f"{existing.origin}; {definition.origin} cannot use the same name and version."
                )
            self._tasks[key] = definition

    def unregister(self, name: str, version: str) -> None:
        with self._lock:
            self._tasks.pop((name, version), None)

    def get(self, name: str, version: str) -> TaskDefinition | None:
        return self._tasks.get((name, version))

    def has(self, name: str, version: str) -> bool:
        return (name, version) in self._tasks

    def versions(self, name: str) -> list[str]:
        return sorted(v for (n, v) in self._tasks if n == name)

    def all(self) -> list[TaskDefinition]:
        return sorted(self._tasks.values(), key=lambda t: (t.name, t.version))


tasks = TaskRegistry()


def task(name: str | Callable[[Any], Any] | None = None, *, version: str | int = "1", retry: Retry | None = None):
    """Register ``fn(input)`` as a task workflow documents can run.

    ``@durableflow.task("fetch-order", version="2")``, or bare ``@durableflow.task`` to use the
    function's name. ``retry=``: the step's retry policy when a document runs it.
    """

    def decorator(fn: Callable[[Any], Any]) -> Callable[[Any], Any]:
        if not callable(fn) or inspect.iscoroutinefunction(fn) or inspect.isgeneratorfunction(fn):
            raise TypeError(f"Task {fn!r} must be a plain function fn(input).")
        tasks.register(
            TaskDefinition(
                name=task_name or fn.__name__,
                version=str(version),
                fn=fn,
                retry=retry,
                description=inspect.getdoc(fn) or "",
            )
        )
        return fn

    if type(version) is int:
        version = str(version)
    if not isinstance(version, str) or not version.strip() or len(version) > MAX_NAME:
        raise ValueError("a task version is a non-blank string of at most 200 characters")
    if callable(name):
        task_name = None
        return decorator(name)
    if name is not None and (not isinstance(name, str) or not name.strip() or len(name) > MAX_NAME):
        raise ValueError("a task name is a non-blank string of at most 200 characters")
    task_name = name
    return decorator
