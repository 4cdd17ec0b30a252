"""The workflow registry: ``@durableflow.workflow`` and lookups by name.

Code workflows register here at import. Other kinds of workflows come from **sources**: a
registry ``layered(source)`` over this one sees the same code workflows and, under other
names, the source's. The Django face runs its verbs on ``registry.layered(documents)``, whose
source finds workflow documents in their table (``durableflow.orm.documents``), so that
``durableflow.start(name)`` and a delivery find a document exactly as they find code; the
engine, the in-memory tester and this module stay free of the database. A code workflow
wins over a source's of the same name.
"""

from __future__ import annotations

import contextlib
import inspect
import threading
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, Protocol

from durableflow import exceptions
from durableflow.options import Concurrency

__all__ = ["WorkflowDefinition", "WorkflowSource", "Registry", "registry", "workflow"]


@dataclass(frozen=True)
class WorkflowDefinition:
    name: str
    fn: Callable[..., Any]
    version: str = "1"
    on_event: str | None = None
    concurrency: Concurrency | None = None
    description: str = field(default="", compare=False)
    kind: str = "code"  # or "document"

    @property
    def origin(self) -> str:
        fn = self.fn
        return f"{fn.__module__}.{getattr(fn, '__qualname__', type(fn).__qualname__)}"


class WorkflowSource(Protocol):
    """Workflows the registry finds by name besides the registered code (documents)."""

    def get(self, name: str, version: str | None = None) -> WorkflowDefinition | None:
        """The workflow ``name`` at ``version`` (a run pinned to it), or the one to start now (None)."""

    def all(self) -> list[WorkflowDefinition]:
        """Every workflow a start can name, one per name."""


class Registry:
    """Workflows known to this process, by name.

    Registration happens at import time (``workflows`` modules are discovered by the app
    config), so a lock is enough: the registry is read far more often than written.
    """

    def __init__(self) -> None:
        self._definitions: dict[str, WorkflowDefinition] = {}
        self._sources: tuple[WorkflowSource, ...] = ()
        self._lock = threading.Lock()

    def layered(self, *sources: WorkflowSource) -> Registry:
        """A registry with this one's code workflows (registered before or after) and ``sources``."""
        layered = Registry()
        layered._definitions, layered._lock = self._definitions, self._lock
        layered._sources = (*self._sources, *sources)
        return layered

    def register(self, definition: WorkflowDefinition) -> None:
        with self._lock:
            existing = self._definitions.get(definition.name)
            # Re-importing the same module (autoreload, tests) registers the same origin again.
            if existing is not None and existing.origin != definition.origin:
                raise ValueError(
                    f"Workflow {definition.name!r} is already registered by {existing.origin}; "
                    f"{definition.origin} cannot use the same name."
                )
            self._definitions[definition.name] = definition

    def unregister(self, name: str) -> None:
        with self._lock:
            self._definitions.pop(name, None)

    def get(self, name: str, version: str | None = None) -> WorkflowDefinition | None:
        """The code workflow ``name``, else a source's: at ``version`` (a delivery asks for the
        one its execution started with), or the one a start would run (``version=None``)."""
        definition = self._definitions.get(name)
        if definition is not None:
            return definition
        for source in self._sources:
            definition = source.get(name, version)
            if definition is not None:
                return definition
        return None

    def is_code(self, name: str) -> bool:
        return name in self._definitions

    def resolve(self, workflow: str | Callable[..., Any] | WorkflowDefinition) -> WorkflowDefinition:
        """The definition for a name, a decorated function or a definition."""
        if isinstance(workflow, WorkflowDefinition):
            return workflow
        name = getattr(workflow, "__durableflow__", None)
        name = name.name if isinstance(name, WorkflowDefinition) else workflow
        definition = self.get(name) if isinstance(name, str) else None
        if definition is None:
            raise exceptions.WorkflowStartError(
                "UNKNOWN_WORKFLOW",
                f"No workflow is registered as {name!r}, and no valid workflow document has that name. "
                f"Is its module named 'workflows' in an installed app, or imported before the start?",
            )
        return definition

    def for_event(self, event_type: str) -> list[WorkflowDefinition]:
        """The workflows started by each published event of ``event_type`` (``on_event=``)."""
        return sorted((d for d in self._definitions.values() if d.on_event == event_type), key=lambda d: d.name)

    def all(self) -> list[WorkflowDefinition]:
        """Every workflow a start can name (code, then sources' under other names), by name."""
        found = dict(self._definitions)
        for source in self._sources:
            for definition in source.all():
                found.setdefault(definition.name, definition)
        return sorted(found.values(), key=lambda d: d.name)

    @contextlib.contextmanager
    def override(self, definition: WorkflowDefinition) -> Iterator[WorkflowDefinition]:
        """Register ``definition`` in place of any other of that name for a block (tests)."""
        with self._lock:
            previous = self._definitions.get(definition.name)
            self._definitions[definition.name] = definition
        try:
            yield definition
        finally:
            with self._lock:
                if previous is None:
                    self._definitions.pop(definition.name, None)
                else:
                    self._definitions[definition.name] = previous


registry = Registry()


def workflow(
    name: str | Callable[..., Any] | None = None,
    *,
    version: str = "1",
    on_event: str | None = None,
    concurrency: Concurrency | None = None,
):
    """Register ``fn(ctx, params)`` as a durable workflow.

    ``@durableflow.workflow("order-fulfilment", version="2")``, or bare
    ``@durableflow.workflow`` to use the function's name.
    """

    def decorator(fn: Callable[..., Any]) -> Callable[..., Any]:
        if inspect.iscoroutinefunction(fn) or inspect.isgeneratorfunction(fn):
            raise TypeError(f"Workflow {fn.__qualname__} must be a plain function fn(ctx, params).")
        definition = WorkflowDefinition(
            name=workflow_name or fn.__name__,
            fn=fn,
            version=str(version),
            on_event=on_event,
            concurrency=concurrency,
            description=inspect.getdoc(fn) or "",
        )
        registry.register(definition)
        fn.__durableflow__ = definition
        return fn

    if callable(name):
        workflow_name = None
        return decorator(name)
    if name is not None and (not isinstance(name, str) or not name or len(name) > 200):
        raise ValueError("a workflow name is a non-empty string of at most 200 characters")
    workflow_name = name
    return decorator
