"""Workflow documents: edited here, each save a new revision; problems shown at the member.

Unlike the other records, a document is written in the admin: the add form takes a name and
the JSON; the change form of a revision takes the next revision's JSON (saving never changes
the revision on the page, which running executions may be pinned to: it makes a new one and
shows it). The form compiles the document first: an invalid one is not saved, and the page
shows the code, the message and the document with the offending member marked. A saved
revision's page draws its statechart (SVG, server-side).
"""

from __future__ import annotations

import json
import uuid
from typing import Any

from django import forms
from django.contrib import admin, messages
from django.http import HttpResponseRedirect
from django.utils.html import format_html
from django.utils.safestring import SafeString, mark_safe

from durableflow import exceptions, operations
from durableflow.admin.actions import Action
from durableflow.admin.base import Panel, RecordAdmin
from durableflow.admin.forms import JsonField
from durableflow.documents import diagram
from durableflow.documents.compiler import compile_document
from durableflow.documents.source import check_name
from durableflow.models import WorkflowDocument
from durableflow.orm.documents import error_of
from durableflow.registry import registry as code_registry

__all__ = ["WorkflowDocumentAdmin", "marked_document"]

# A document this long (as JSON) is shown around its problem only.
WHOLE_CHARS = 20_000
FRAGMENT_LINES = 200


class DocumentField(JsonField):
    """JSON typed in a textarea, parsed as the API parses a body; the form's ``clean`` compiles
    it, which gives the verdict the API gives (``DOCUMENT_NOT_JSON`` with the pointer...)."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(verdict=None, **kwargs)


class DocumentForm(forms.ModelForm):
    """The name (a new document's) and the JSON; compiled before anything is saved."""

    document = DocumentField(
        required=True,
        widget=forms.Textarea(attrs={"rows": 28, "cols": 100, "class": "vLargeTextField df-json-input",
                                     "spellcheck": "false"}),  # fmt: skip
        help_text='{"$workflow": "0.2", "initial": ..., "states": {...}}. Saving makes a new revision.',
    )

    class Meta:
        model = WorkflowDocument
        fields = ["name", "document"]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.problem: exceptions.DocumentError | None = None
        if self.instance.pk:  # the next revision starts from this one, as its author wrote it
            self.initial["document"] = self.instance.source or json.dumps(self.instance.document, indent=2)

    def clean(self) -> dict[str, Any]:
        data = super().clean()
        name = self.instance.name if self.instance.pk else data.get("name")
        if name is None or "document" not in data:
            return data
        try:
            check_name(name, code_registry)
            if not self.instance.pk and WorkflowDocument.objects.filter(name=name).exists():
                raise exceptions.DocumentError("DOCUMENT_EXISTS", f"a document named {name!r} exists: edit it instead")
            compile_document(data["document"])
        except exceptions.DocumentError as exc:
            field = "document" if exc.pointer or exc.code not in _NAME_CODES else "name"
            if field == "document":
                self.problem, self.problem_document = exc, data["document"]
            where = f" at {exc.pointer}" if exc.pointer else ""
            self.add_error(field, f"{exc.code}{where}: {exc.message}")
        return data


_NAME_CODES = {"INVALID_DOCUMENT_NAME", "DOCUMENT_NAME_TAKEN", "DOCUMENT_EXISTS"}


def _revalidate(verb, obj, data):
    return verb(obj.pk)


@admin.register(WorkflowDocument)
class WorkflowDocumentAdmin(RecordAdmin):
    form = DocumentForm
    change_form_template = "admin/durableflow/workflowdocument/change_form.html"
    list_display = ("name", "revision", "validity", "problem_code", "created_at")
    list_filter = ("valid",)
    search_fields = ("=name", "name__startswith")
    ordering = ("name", "-revision")
    steering = (
        Action(
            name="validate",
            label="Validate again",
            verb_name="validate_document",
            call=_revalidate,
            explanation="Compile the document again with the tasks this process registers (after a deploy), and "
            "record whether it is valid. Executions keep the compiled form they started with.",
            past="validated again",
            bulk=True,
        ),
    )
    panels = (
        Panel("State diagram", "admin/durableflow/workflowdocument/panel_diagram.html",
              lambda admin_, request, obj: admin_.diagram_context(obj), after_summary=True),  # fmt: skip
        Panel("Problem", "admin/durableflow/workflowdocument/panel_problem.html",
              lambda admin_, request, obj: admin_.problem_context(obj), after_summary=True),  # fmt: skip
    )

    # Permissions: documents are written here (each save a new revision), never deleted: a
    # running execution may be pinned to any revision.

    def has_add_permission(self, request):
        return admin.ModelAdmin.has_add_permission(self, request)

    def has_change_permission(self, request, obj=None):
        return admin.ModelAdmin.has_change_permission(self, request, obj)

    def get_fieldsets(self, request, obj=None):
        if obj is None:
            return [(None, {"fields": ["name", "document"]})]
        summary = ["name", "revision", "version", "validity", "label", "created_at"]
        return [(None, {"fields": summary}), ("Next revision", {"fields": ["document"]})]

    def get_readonly_fields(self, request, obj=None):
        if obj is None:
            return []
        return ["name", "revision", "version", "validity", "label", "created_at"]

    # Saving: a new revision, shown next -----------------------------------------------------------

    def save_model(self, request, obj, form, change):
        row, created = operations.save_document(obj.name, form.cleaned_data["document"], new=not change)
        obj.pk, obj.revision, obj.valid, obj.created = row.pk, row.revision, row.valid, created

    def response_add(self, request, obj, post_url_continue=None):
        self.message_user(request, f"Saved {obj}.", messages.SUCCESS)
        return HttpResponseRedirect(self.record_url(obj))

    def response_change(self, request, obj):
        if obj.created:
            message = f"Saved as {obj}; running executions keep the revision they started with."
        else:
            message = f"Nothing changed: {obj} is this document already."
        self.message_user(request, message, messages.SUCCESS if obj.created else messages.INFO)
        return HttpResponseRedirect(self.record_url(obj))

    def render_change_form(self, request, context, add=False, change=False, form_url="", obj=None):
        form = context["adminform"].form
        problem = getattr(form, "problem", None)
        if problem is not None:
            context["typed_problem"] = problem_context_for(error_of(problem), form.problem_document)
        return super().render_change_form(request, context, add, change, form_url, obj)

    # Columns and panels -----------------------------------------------------------------------------

    @admin.display(description="valid", boolean=True, ordering="valid")
    def validity(self, obj):
        return obj.valid

    @admin.display(description="problem")
    def problem_code(self, obj):
        return (obj.error or {}).get("code", "")

    @admin.display(description="revision label")
    def label(self, obj):
        return (obj.document or {}).get("revision", "") if isinstance(obj.document, dict) else ""

    def diagram_context(self, obj) -> dict[str, Any] | None:
        if not obj.compiled:
            return None
        return {"svg": mark_safe(diagram.render(obj.compiled))}  # every text in it is escaped by render

    def problem_context(self, obj) -> dict[str, Any] | None:
        if obj.valid is not False or not obj.error:
            return None
        return problem_context_for(obj.error, obj.authored)


def problem_context_for(error: dict[str, Any], document: Any) -> dict[str, Any]:
    return {"error": error, "marked": marked_document(document, error.get("pointer", ""))}


def marked_document(document: Any, pointer: str) -> SafeString:
    """``document`` as indented JSON in a ``<pre>`` with the member at ``pointer`` marked; a
    missing member (``.../otherwise``) marks the object it is missing from. A long document
    is shown around the member only."""
    path, missing = _resolve(document, pointer)
    shown = document
    try:
        if path and len(json.dumps(document)) > WHOLE_CHARS:
            shown, path = _at(document, path[:-1]), path[-1:]
        before, member, after = _parts(shown, path)
    except (RecursionError, ValueError, TypeError):
        return format_html('<p class="df-note">The document cannot be shown here.</p>')
    head = before.split("\n")
    cut_head = len(head) > FRAGMENT_LINES // 2
    tail = after.split("\n")
    cut_tail = len(tail) > FRAGMENT_LINES // 2
    before = ("…\n" if cut_head else "") + "\n".join(head[-(FRAGMENT_LINES // 2) :])
    after = "\n".join(tail[: FRAGMENT_LINES // 2]) + ("\n…" if cut_tail else "")
    where = "" if shown is document else format_html('<p class="df-quiet">Around {}:</p>', pointer)
    note = format_html('<p class="df-note">Missing here: {}</p>', missing) if missing else ""
    return format_html(
        '{}<pre class="df-json df-document">{}<mark class="df-problem">{}</mark>{}</pre>{}',
        where,
        before,
        member,
        after,
        note,
    )


def _resolve(document: Any, pointer: str) -> tuple[list[Any], str]:
    """The path (keys and indexes) of the deepest member ``pointer`` reaches, and the name of
    the member that is missing there (or "")."""
    parts = [p.replace("~1", "/").replace("~0", "~") for p in pointer.split("/")[1:]] if pointer else []
    path: list[Any] = []
    node = document
    for part in parts:
        if isinstance(node, dict) and part in node:
            path.append(part)
            node = node[part]
        elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
            path.append(int(part))
            node = node[int(part)]
        else:
            return path, part
    return path, ""


def _at(document: Any, path: list[Any]) -> Any:
    for part in path:
        document = document[part]
    return document


def _parts(value: Any, path: list[Any]) -> tuple[str, str, str]:
    """Indented JSON of ``value`` in three parts: before the member at ``path``, the member
    (its key and value), after it."""
    if not path:
        return "", json.dumps(value, indent=2, ensure_ascii=False), ""
    root = value.copy()  # copies along the path only: the rest is shared, never changed
    parent = root
    for part in path[:-1]:
        parent[part] = parent[part].copy()
        parent = parent[part]
    member = parent[path[-1]]
    sentinel = f"durableflow-{uuid.uuid4().hex}"
    parent[path[-1]] = sentinel
    text = json.dumps(root, indent=2, ensure_ascii=False)
    at = text.index(f'"{sentinel}"')
    line = text.rfind("\n", 0, at) + 1
    indent = len(text[line:at]) - len(text[line:at].lstrip(" "))
    value_text = json.dumps(member, indent=2, ensure_ascii=False).replace("\n", "\n" + " " * indent)
    return text[: line + indent], text[line + indent : at] + value_text, text[at + len(sentinel) + 2 :]
