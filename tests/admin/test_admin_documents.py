"""Workflow documents in the admin: written as JSON, a new revision per save, refused at the
member, drawn as a statechart."""

from __future__ import annotations

import json
import re

import pytest
from django.urls import reverse

from durableflow import operations
from durableflow.models import WorkflowDocument
from tests.admin_support import staff, text
from tests.helpers import uid

pytestmark = pytest.mark.usefixtures("no_broker")

ADD = "admin:durableflow_workflowdocument_add"
DOCUMENT = {"$workflow": "0.2", "initial": "echo", "states": {
    "echo": {"work": {"task": "t.echo", "version": "1"}, "then": "check"},
    "check": {"choose": [{"guard": "data.ok", "to": "done"}], "otherwise": "echo", "limit": 5},
    "done": {"final": True},
}}  # fmt: skip


def page(row) -> str:
    return reverse("admin:durableflow_workflowdocument_change", args=[row.pk])


def test_a_document_is_added_as_revision_1_and_shown_with_its_statechart(db, admin_client):
    name = uid("doc")
    response = admin_client.post(reverse(ADD), {"name": name, "document": json.dumps(DOCUMENT)})
    row = WorkflowDocument.objects.get(name=name)
    assert response.status_code == 302 and response["Location"] == page(row)
    assert (row.revision, row.valid) == (1, True)

    body = admin_client.get(page(row)).content.decode()
    assert 'class="durableflow-statechart"' in body
    assert re.findall(r'data-path="([^"]+)"', body) == ["echo", "check", "done"]
    assert "document-1" in text(admin_client.get(page(row)))


def test_an_invalid_document_is_refused_with_the_member_marked(db, admin_client):
    name = uid("doc")
    broken = json.loads(json.dumps(DOCUMENT))
    del broken["states"]["check"]["otherwise"]
    response = admin_client.post(reverse(ADD), {"name": name, "document": json.dumps(broken)})
    assert response.status_code == 200
    assert not WorkflowDocument.objects.filter(name=name).exists()
    page_text = text(response)
    assert "MISSING_OTHERWISE at /states/check/otherwise" in page_text
    assert "Missing here: otherwise" in page_text
    marked = re.search(r'<mark class="df-problem">(.*?)</mark>', response.content.decode(), re.S).group(1)
    assert marked.startswith("&quot;check&quot;: {") and "data.ok" in marked  # the object it is missing from


def test_a_member_that_is_there_is_marked_itself(db, admin_client):
    broken = json.loads(json.dumps(DOCUMENT))
    broken["states"]["echo"]["then"] = "chek"
    response = admin_client.post(reverse(ADD), {"name": uid("doc"), "document": json.dumps(broken)})
    marked = re.search(r'<mark class="df-problem">(.*?)</mark>', response.content.decode(), re.S).group(1)
    assert marked == "&quot;then&quot;: &quot;chek&quot;"
    assert "UNDECLARED_STATE at /states/echo/then" in text(response)


def test_json_that_does_not_parse_and_names_that_are_taken_are_refused_at_their_field(db, admin_client):
    response = admin_client.post(reverse(ADD), {"name": uid("doc"), "document": "{not json"})
    assert "Not valid JSON" in text(response)
    response = admin_client.post(reverse(ADD), {"name": "t.steps", "document": json.dumps(DOCUMENT)})
    assert "DOCUMENT_NAME_TAKEN" in text(response)
    name = uid("doc")
    operations.save_document(name, DOCUMENT)
    response = admin_client.post(reverse(ADD), {"name": name, "document": json.dumps(DOCUMENT)})
    assert "DOCUMENT_EXISTS" in text(response)


def test_saving_a_revision_s_page_makes_the_next_revision(db, admin_client):
    name = uid("doc")
    first, _ = operations.save_document(name, DOCUMENT)
    edited = {**DOCUMENT, "revision": "second"}
    response = admin_client.post(page(first), {"document": json.dumps(edited)})
    second = WorkflowDocument.objects.get(name=name, revision=2)
    assert response["Location"] == page(second)
    first.refresh_from_db()
    assert first.document == DOCUMENT  # the revision on the page is never changed
    response = admin_client.post(page(second), {"document": json.dumps(edited)}, follow=True)
    assert "Nothing changed" in text(response)
    assert WorkflowDocument.objects.filter(name=name).count() == 2


def test_a_stored_invalid_revision_shows_its_problem_at_the_member(db, admin_client):
    name = uid("doc")
    row = WorkflowDocument.objects.create(name=name, revision=1, document={**DOCUMENT, "initial": "nowhere"},
                                          valid=False, error={"code": "UNDECLARED_STATE", "message": "no state",
                                                              "pointer": "/initial"})  # fmt: skip
    body = admin_client.get(page(row)).content.decode()
    assert re.search(r'<mark class="df-problem">&quot;initial&quot;: &quot;nowhere&quot;</mark>', body)
    assert "durableflow-statechart" not in body


def test_validate_again_records_the_verdict(db, admin_client):
    row = WorkflowDocument.objects.create(name=uid("doc"), revision=1, document=DOCUMENT)  # as a fixture loads it
    url = reverse("admin:durableflow_workflowdocument_action", args=[row.pk, "validate"])
    assert admin_client.get(url).status_code == 200  # the confirmation page
    admin_client.post(url, {})
    row.refresh_from_db()
    assert row.valid is True


def test_the_execution_list_can_be_filtered_by_a_document(db, admin_client):
    name = uid("doc")
    operations.save_document(name, DOCUMENT)
    body = admin_client.get(reverse("admin:durableflow_execution_changelist")).content.decode()
    assert f"?workflow={name}" in body


def test_a_viewer_reads_but_cannot_save(db, client, django_user_model):
    row, _ = operations.save_document(uid("doc"), DOCUMENT)
    client.force_login(staff(django_user_model, "reader", "view_workflowdocument"))
    assert client.get(page(row)).status_code == 200
    assert client.post(page(row), {"document": json.dumps(DOCUMENT)}).status_code == 403
    assert client.get(reverse(ADD)).status_code == 403
