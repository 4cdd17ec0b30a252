"""Workflow documents: one row per revision of a named JSON statechart.

Revisions are immutable once written: an edit is a new revision (1, 2, 3… per name), and an
execution pinned to a revision (its ``version``, ``"document-3"``) runs that row's compiled
form to its end whatever is saved later. ``valid`` is None for a row loaded from a fixture
and not compiled yet; the registry compiles it on first use.
"""

from __future__ import annotations

from django.db import models
from django.db.models.functions import Now

__all__ = ["WorkflowDocument"]


class WorkflowDocumentQuerySet(models.QuerySet):
    def named(self, name: str):
        return self.filter(name=name).order_by("-revision")

    def latest(self):
        """The newest revision of each name."""
        newest = self.model.objects.filter(name=models.OuterRef("name")).order_by("-revision").values("revision")[:1]
        return self.filter(revision=models.Subquery(newest))


class WorkflowDocument(models.Model):
    """A revision of a workflow document: the JSON as saved, its compiled form and its verdict."""

    id = models.BigAutoField(primary_key=True)
    name = models.CharField(max_length=200)
    revision = models.PositiveIntegerField()
    document = models.JSONField(help_text='the statechart: {"$workflow": "0.2", "initial": ..., "states": {...}}')
    # The document's JSON text as saved: its members in their author's order, which
    # PostgreSQL's jsonb does not keep (the admin edits this text, the API returns it).
    source = models.TextField(blank=True, default="", editable=False)
    compiled = models.JSONField(null=True, blank=True, editable=False)
    valid = models.BooleanField(null=True, editable=False)
    # The first problem found: {"code", "message", "pointer"} (None when valid).
    error = models.JSONField(null=True, blank=True, editable=False)
    created_at = models.DateTimeField(db_default=Now(), editable=False)

    objects = WorkflowDocumentQuerySet.as_manager()

    class Meta:
        ordering = ["name", "-revision"]
        constraints = [
            # Two saves of one name racing for the same number: one wins, the other takes the
            # next. Its index also reads a name's newest revision first (scanned backwards).
            models.UniqueConstraint(fields=["name", "revision"], name="durableflow_document_revision"),
        ]

    def __str__(self) -> str:
        return f"{self.name} #{self.revision}"

    @property
    def authored(self) -> object:
        """The document with its members in the order they were written."""
        import json

        return json.loads(self.source) if self.source else self.document

    @property
    def version(self) -> str:
        """The workflow version of executions pinned to this revision."""
        from durableflow.documents.source import version_of

        return version_of(self.revision)
