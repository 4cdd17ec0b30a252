"""Workflow documents in the database: saving revisions, and the registry's source of them.

``source`` is the ``DocumentSource`` the Django face's registry (``registry``) consults after
the code workflows: a start by name reads the newest valid revision (one indexed query), a
delivery asks for the revision its execution is pinned to, which is read once per process
and cached (revisions never change).

Concurrency: two saves of one name may race for the next revision number; the unique
constraint lets one insert win and the other tries the next number. A row loaded from a
fixture (``valid`` is None) is compiled on first use by whoever reads it first; the write
that records the verdict is conditional on the row still being uncompiled, so two readers
racing write it once (and compute the same verdict anyway).
"""

from __future__ import annotations

import json
from typing import Any

from django.db import IntegrityError, transaction
from django.db.models import OuterRef, Subquery

from durableflow import exceptions
from durableflow.documents.compiler import compile_document
from durableflow.documents.source import DocumentSource, Revision, check_name
from durableflow.models import WorkflowDocument
from durableflow.orm.core import db_alias
from durableflow.registry import registry as code_registry

__all__ = ["OrmDocuments", "source", "registry", "save", "validate_again"]

_RACES = 10  # saves of one name racing for a revision number before giving up


class OrmDocuments(DocumentSource):
    """The registry's source of documents on the ``WorkflowDocument`` table."""

    def _rows(self):
        return WorkflowDocument.objects.using(db_alias())

    def _pinned(self, name: str, revision: int) -> Revision | None:
        row = self._rows().filter(name=name, revision=revision).first()
        return None if row is None else _revision(_compiled(row))

    def _latest_valid(self, name: str) -> Revision | None:
        # Newest first; a fixture's uncompiled row is compiled on the way.
        for row in self._rows().named(name).exclude(valid=False).iterator(chunk_size=10):
            row = _compiled(row)
            if row.valid:
                return _revision(row)
        return None

    def _latest_valid_all(self) -> list[Revision]:
        candidates = self._rows().exclude(valid=False)
        newest = candidates.filter(name=OuterRef("name")).order_by("-revision").values("revision")[:1]
        found = []
        for row in candidates.filter(revision=Subquery(newest)).order_by("name"):
            row = _compiled(row)
            revision = _revision(row) if row.valid else self._latest_valid(row.name)
            if revision is not None:
                found.append(revision)
        return found


source = OrmDocuments()
registry = code_registry.layered(source)


def save(name: str, document: Any, *, new: bool | None = None) -> tuple[WorkflowDocument, bool]:
    """Compile ``document`` and save it as the next revision of ``name``: ``(row, created)``.

    ``new=True``: only if no document has that name (else ``DOCUMENT_EXISTS``); ``new=False``:
    only if one does (else ``NOT_FOUND``). The same document as the newest revision is not
    saved again (``created`` is False). An invalid document raises ``DocumentError`` and saves
    nothing: a revision that could not run is never written by this path.
    """
    check_name(name, code_registry)
    compiled = compile_document(document)  # also proves it JSON data (every member is checked)
    source = json.dumps(document, indent=2, ensure_ascii=False)
    rows = WorkflowDocument.objects.using(db_alias())
    for _ in range(_RACES):
        latest = rows.named(name).first()
        if new is True and latest is not None:
            raise exceptions.DocumentError(
                "DOCUMENT_EXISTS", f"a document named {name!r} exists (revision {latest.revision}): PUT a new revision"
            )
        if new is False and latest is None:
            raise exceptions.ExecutionNotFound(message=f"no workflow document is named {name!r}")
        if latest is not None and latest.valid and latest.source == source:
            return latest, False
        try:
            with transaction.atomic(using=db_alias()):
                row = rows.create(
                    name=name,
                    revision=(latest.revision + 1) if latest else 1,
                    document=document,
                    source=source,
                    compiled=compiled,
                    valid=True,
                )
        except IntegrityError:
            continue  # another save took that number: read the newest again
        return rows.get(pk=row.pk), True  # with created_at from the database
    raise exceptions.DocumentError("DOCUMENT_EXISTS", f"document {name!r} is being saved by others right now; retry")


def validate_again(rows) -> dict[str, int]:
    """Compile stored revisions again (after a deploy changed the registered tasks) and record
    the verdict. A pinned run keeps the compiled form it started with either way."""
    counts = {"valid": 0, "invalid": 0}
    for row in rows:
        verdict = _verdict(row.authored)
        fields = {"valid": verdict["valid"], "error": verdict["error"]}
        if row.compiled is None and verdict["compiled"] is not None:
            fields["compiled"] = verdict["compiled"]
        WorkflowDocument.objects.using(db_alias()).filter(pk=row.pk).update(**fields)
        counts["valid" if verdict["valid"] else "invalid"] += 1
    return counts


def _compiled(row: WorkflowDocument) -> WorkflowDocument:
    """``row`` with its verdict; a fixture's uncompiled row is compiled now and recorded once."""
    if row.valid is not None:
        return row
    verdict = _verdict(row.authored)
    WorkflowDocument.objects.using(db_alias()).filter(pk=row.pk, valid__isnull=True).update(**verdict)
    row.valid, row.error, row.compiled = verdict["valid"], verdict["error"], verdict["compiled"]
    return row


def _verdict(document: Any) -> dict[str, Any]:
    try:
        return {"valid": True, "error": None, "compiled": compile_document(document)}
    except exceptions.DocumentError as exc:
        return {"valid": False, "compiled": None, "error": error_of(exc)}


def error_of(exc: exceptions.DocumentError) -> dict[str, str]:
    return {"code": exc.code, "message": exc.message, "pointer": exc.pointer}


def _revision(row: WorkflowDocument) -> Revision:
    return Revision(row.name, row.revision, row.document, row.compiled, row.valid, row.error)
