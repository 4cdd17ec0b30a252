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
import re
import threading
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, Protocol

from durableflow import exceptions
from durableflow.options import Concurrency

__all__ = ["WorkflowDefinition", "WorkflowSource", "Registry", "registry", "workflow", "MAX_VERSION"]

MAX_VERSION = 64  # Execution.version


@dataclass(frozen=True)
class WorkflowDefinition:
    name: str
    fn: Callable[..., Any]
    version: str = "1"
    on_event: str | None = None
    concurrency: Concurrency | None = None
    description: str = field(default="", compare=False)
    kind: str = "code"  # or "document"
    default: bool = False  # the version a start runs, whichever is newest

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
    """Workflows known to this process, by name, each name with one or more versions.

    Several versions of a name may be registered side by side (each by its own function): a
    start runs the one marked ``default=True``, else the newest; an execution runs the version
    it started with for as long as that version is registered.

    Registration happens at import time (``workflows`` modules are discovered by the app
    config), so a lock is enough: the registry is read far more often than written.
    """

    def __init__(self) -> None:
        self._definitions: dict[str, WorkflowDefinition] = {}  # by name: the version a start runs
        self._versions: dict[str, dict[str, WorkflowDefinition]] = {}  # by name, then version
        self._sources: tuple[WorkflowSource, ...] = ()
        self._lock = threading.Lock()

    def layered(self, *sources: WorkflowSource) -> Registry:
        """A registry with this one's code workflows (registered before or after) and ``sources``."""
        layered = Registry()
        layered._definitions, layered._versions, layered._lock = self._definitions, self._versions, self._lock
        layered._sources = (*self._sources, *sources)
        return layered

    def register(self, definition: WorkflowDefinition) -> None:
        with self._lock:
            versions = dict(self._versions.get(definition.name, {}))
            existing = versions.get(definition.version)
            # Re-importing the same module (autoreload, tests) registers the same origin again.
            if existing is not None and existing.origin != definition.origin:
                raise ValueError(
                    f"Version {definition.version!r} of workflow {definition.name!r} is already registered by "
                    f"{existing.origin}; {definition.origin} cannot use the same name and version "
                    "(give it another version to keep both)."
                )
            # The same function under another version (its decorator edited, the module re-imported)
            # replaces its old self: versions side by side are different functions.
            versions = {v: d for v, d in versions.items() if d.origin != definition.origin}
            other = next((d for d in versions.values() if d.default), None)
            if definition.default and other is not None:
                raise ValueError(
                    f"Version {other.version!r} of workflow {definition.name!r} is already marked default=True "
                    f"({other.origin}); only one version of a workflow can be."
                )
            versions[definition.version] = definition
            self._versions[definition.name] = versions
            self._definitions[definition.name] = _current(versions)

    def unregister(self, name: str, version: str | None = None) -> None:
        """Forget ``name`` (every version), or only its ``version``."""
        with self._lock:
            versions = {v: d for v, d in self._versions.get(name, {}).items() if version is not None and v != version}
            self._set(name, versions)

    def get(self, name: str, version: str | None = None) -> WorkflowDefinition | None:
        """The workflow ``name`` at ``version`` (a delivery asks for the one its execution started
        with), or the one a start runs now (``version=None``): code first, else a source's."""
        if name in self._definitions:
            return self._definitions[name] if version is None else self._versions.get(name, {}).get(version)
        for source in self._sources:
            definition = source.get(name, version)
            if definition is not None:
                return definition
        return None

    def is_code(self, name: str) -> bool:
        return name in self._definitions

    def is_current(self, definition: WorkflowDefinition) -> bool:
        """Whether a start of ``definition``'s name runs it (sources list only those)."""
        current = self._definitions.get(definition.name)
        return current is definition if current is not None else definition.kind != "code"

    def resolve(self, workflow: str | Callable[..., Any] | WorkflowDefinition) -> WorkflowDefinition:
        """The definition for a name (the version a start runs), a decorated function (its own
        version, while registered) or a definition."""
        if isinstance(workflow, WorkflowDefinition):
            return workflow
        name = getattr(workflow, "__durableflow__", None)
        if isinstance(name, WorkflowDefinition):
            if self.get(name.name, name.version) is name:
                return name
            name = name.name
        else:
            name = workflow
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
        """Every workflow a start can name, as a start runs it (code, then sources' under other names), by name."""
        found = dict(self._definitions)
        for source in self._sources:
            for definition in source.all():
                found.setdefault(definition.name, definition)
        return sorted(found.values(), key=lambda d: d.name)

    def versions(self, name: str | None = None) -> list[WorkflowDefinition]:
        """Every registered version (of ``name``, or of every workflow), by name, then oldest first.

        A source contributes what a start of its names runs (a document's newest valid revision).
        """
        if name is not None:
            if name in self._versions:
                return sorted(self._versions[name].values(), key=_newness)
            found = self.get(name)
            return [] if found is None else [found]
        listed = [d for versions in self._versions.values() for d in versions.values()]
        listed += [d for d in self.all() if d.name not in self._versions]
        return sorted(listed, key=lambda d: (d.name, _newness(d)))

    @contextlib.contextmanager
    def override(self, definition: WorkflowDefinition) -> Iterator[WorkflowDefinition]:
        """Register ``definition`` in place of every version of that name for a block (tests)."""
        with self._lock:
            previous = self._versions.get(definition.name, {})
            self._set(definition.name, {definition.version: definition})
        try:
            yield definition
        finally:
            with self._lock:
                self._set(definition.name, previous)

    def _set(self, name: str, versions: dict[str, WorkflowDefinition]) -> None:
        if versions:
            self._versions[name], self._definitions[name] = versions, _current(versions)
        else:
            self._versions.pop(name, None)
            self._definitions.pop(name, None)


def _newness(definition: WorkflowDefinition) -> tuple:
    """Versions compare as numbers where they are numbers: "9" < "10" < "10.1" < "10b"."""
    return tuple((0, int(part), "") if part.isdigit() else (1, 0, part) for part in _PARTS.findall(definition.version))


def _current(versions: dict[str, WorkflowDefinition]) -> WorkflowDefinition:
    """The version a start runs: the one marked ``default=True``, else the newest."""
    marked = [d for d in versions.values() if d.default]
    return marked[0] if marked else max(versions.values(), key=_newness)


_PARTS = re.compile(r"\d+|[^\d.]+")


registry = Registry()


def workflow(
    name: str | Callable[..., Any] | None = None,
    *,
    version: str = "1",
    on_event: str | None = None,
    concurrency: Concurrency | None = None,
    default: bool = False,
):
    """Register ``fn(ctx, params)`` as a durable workflow.

    ``@durableflow.workflow("order-fulfilment", version="2")``, or bare
    ``@durableflow.workflow`` to use the function's name.

    Another function may register another version of the same name, side by side: executions
    started with a version run it as long as it is registered, and a start runs the newest
    version (versions compare as numbers where they are numbers: "10" is newer than "9"), or
    the one registered with ``default=True``.
    """

    version = str(version)
    if not version or len(version) > MAX_VERSION or version != version.strip():
        raise ValueError(f"a workflow version is a non-blank string of at most {MAX_VERSION} characters, not {version!r}")

    def decorator(fn: Callable[..., Any]) -> Callable[..., Any]:
        if inspect.iscoroutinefunction(fn) or inspect.isgeneratorfunction(fn):
            raise TypeError(f"Workflow {fn.__qualname__} must be a plain function fn(ctx, params).")
        definition = WorkflowDefinition(
            name=workflow_name or fn.__name__,
            fn=fn,
            version=version,
            on_event=on_event,
            concurrency=concurrency,
            description=inspect.getdoc(fn) or "",
            default=bool(default),
        )
        registry.register(definition)
        fn.__durableflow__ = definition  # type: ignore[attr-defined]  # how a decorated function finds its definition
        return fn

    if callable(name):
        workflow_name = None
        return decorator(name)
    if name is not None and (not isinstance(name, str) or not name or len(name) > 200):
        raise ValueError("a workflow name is a non-empty string of at most 200 characters")
    workflow_name = name
    return decorator
