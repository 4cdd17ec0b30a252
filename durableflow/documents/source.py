"""Documents as workflows: the registry finds them by name, each run pinned to one revision.

A document's revisions are numbered 1, 2, 3… per name and never change once saved. A start
by name runs the latest *valid* revision; the execution records it as its workflow
``version`` (``"document-3"``), and every delivery asks the registry for that version, so
editing a document (a new revision) never changes a running execution. The interpreter
runs the revision's stored compiled form.

``DocumentSource`` is what a registry source shares: the definitions it builds and a
bounded cache of pinned revisions (immutable, so cached for good). Storing revisions is the
subclass's: ``MemoryDocuments`` here (the in-memory tester), the ORM's in
``durableflow.orm.documents``.
"""

from __future__ import annotations

import json
import threading
from collections import OrderedDict
from typing import Any

from durableflow import exceptions, values
from durableflow.documents.compiler import compile_document
from durableflow.registry import Registry, WorkflowDefinition

__all__ = [
    "DocumentSource",
    "DocumentWorkflow",
    "MemoryDocuments",
    "Revision",
    "version_of",
    "revision_of",
    "check_name",
    "definition_for",
]

VERSION_PREFIX = "document-"
MAX_NAME = 200
_CACHED = 512


def version_of(revision: int) -> str:
    return f"{VERSION_PREFIX}{revision}"


def revision_of(version: str | None) -> int | None:
    """The revision a workflow ``version`` pins, or None if it names none."""
    if not version or not version.startswith(VERSION_PREFIX):
        return None
    number = version[len(VERSION_PREFIX) :]
    return int(number) if number.isdigit() and len(number) < 19 else None


class DocumentWorkflow:
    """``fn(ctx, params)`` of a document's revision: the interpreter over its compiled form."""

    def __init__(self, name: str, revision: int, compiled: dict[str, Any]):
        self.name = name
        self.revision = revision
        self.compiled = compiled
        self.__module__ = __name__
        self.__qualname__ = f"DocumentWorkflow[{name}#{revision}]"

    def __call__(self, ctx: Any, params: Any) -> Any:
        from durableflow.documents import interpreter

        return interpreter.run(ctx, self.compiled, params)


def definition_for(name: str, revision: int, compiled: dict[str, Any]) -> WorkflowDefinition:
    return WorkflowDefinition(
        name=name,
        fn=DocumentWorkflow(name, revision, compiled),
        version=version_of(revision),
        description=compiled.get("description", ""),
        kind="document",
    )


def check_name(name: Any, registry: Registry) -> str:
    """A document's name: like a workflow's, and not one a code workflow has."""
    if not isinstance(name, str) or not name.strip() or len(name) > MAX_NAME or values.text_fault(name) or "/" in name:
        raise exceptions.DocumentError(
            "INVALID_DOCUMENT_NAME",
            f"a document's name is a non-blank string of at most {MAX_NAME} characters, without '/' (it is a URL part)",
        )
    if registry.is_code(name):
        raise exceptions.DocumentError(
            "DOCUMENT_NAME_TAKEN",
            f"a code workflow is registered as {name!r}: a document cannot take its name (the code would win)",
        )
    return name


class Revision:
    """One saved revision, as a source reads it."""

    __slots__ = ("name", "revision", "document", "compiled", "valid", "error")

    def __init__(self, name, revision, document, compiled=None, valid=None, error=None):
        self.name, self.revision, self.document = name, revision, document
        self.compiled, self.valid, self.error = compiled, valid, error


class DocumentSource:
    """A registry source of documents. Subclasses read revisions: ``_pinned(name, revision)``
    and ``_latest_valid(name)``, ``_names()`` (each as a ``Revision`` or None)."""

    def __init__(self) -> None:
        self._cache: OrderedDict[tuple[str, int], WorkflowDefinition] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, name: str, version: str | None = None) -> WorkflowDefinition | None:
        if not isinstance(name, str) or not name or len(name) > MAX_NAME or values.text_fault(name):
            return None  # no document can have it (and no database could be asked for it)
        if version is None:
            found = self._latest_valid(name)
            return None if found is None else self._definition(found)
        revision = revision_of(version)
        if revision is None:
            return None
        with self._lock:
            cached = self._cache.get((name, revision))
        if cached is not None:
            return cached
        found = self._pinned(name, revision)
        return None if found is None or found.compiled is None else self._definition(found)

    def all(self) -> list[WorkflowDefinition]:
        return [self._definition(found) for found in self._latest_valid_all()]

    def _definition(self, found: Revision) -> WorkflowDefinition:
        key = (found.name, found.revision)
        with self._lock:
            definition = self._cache.get(key)
            if definition is None:
                definition = definition_for(found.name, found.revision, found.compiled)
                self._cache[key] = definition
                if len(self._cache) > _CACHED:
                    self._cache.popitem(last=False)
            else:
                self._cache.move_to_end(key)
        return definition

    def _pinned(self, name: str, revision: int) -> Revision | None:
        raise NotImplementedError

    def _latest_valid(self, name: str) -> Revision | None:
        raise NotImplementedError

    def _latest_valid_all(self) -> list[Revision]:
        raise NotImplementedError


class MemoryDocuments(DocumentSource):
    """Documents in memory, for ``WorkflowTester`` and tests: ``registry.add_source(docs)``."""

    def __init__(self, registry: Registry | None = None) -> None:
        super().__init__()
        from durableflow.registry import registry as default

        self.registry = registry or default
        self._revisions: dict[str, list[Revision]] = {}

    def save(self, name: str, document: Any) -> int:
        """Compile and keep ``document`` as the next revision of ``name``; its number.

        ``DocumentError`` for an invalid document (nothing is kept). The same document as
        the latest revision keeps that revision.
        """
        check_name(name, self.registry)
        compiled = compile_document(document)
        document = json.loads(json.dumps(document))  # a copy, in its author's order
        revisions = self._revisions.setdefault(name, [])
        if revisions and revisions[-1].document == document:
            return revisions[-1].revision
        revisions.append(Revision(name, len(revisions) + 1, document, compiled, True))
        return len(revisions)

    def _pinned(self, name: str, revision: int) -> Revision | None:
        revisions = self._revisions.get(name, [])
        return revisions[revision - 1] if 0 < revision <= len(revisions) else None

    def _latest_valid(self, name: str) -> Revision | None:
        return next((r for r in reversed(self._revisions.get(name, [])) if r.valid), None)

    def _latest_valid_all(self) -> list[Revision]:
        found = (self._latest_valid(name) for name in sorted(self._revisions))
        return [revision for revision in found if revision is not None]
