"""``documents/`` over HTTP: saving revisions, refusals with code and pointer, starting by name."""

from __future__ import annotations

import pytest
from django.test import override_settings

from durableflow.models import Execution, WorkflowDocument
from tests import document_corpus as corpus
from tests.apiclient import error
from tests.helpers import uid

DONE = {"$workflow": "0.2", "initial": "echo", "states": {
    "echo": {"work": {"task": "t.echo", "version": "1"}, "then": "done"},
    "done": {"final": True},
}}  # fmt: skip
REVISION_FIELDS = {"name", "revision", "version", "valid", "error", "created_at", "document", "compiled"}


def test_a_new_document_is_saved_as_revision_1(api):
    name = uid("doc")
    response = api.post("documents/", {"name": name, "document": DONE})
    assert response.status_code == 201, response.content
    body = response.json()
    assert set(body) == REVISION_FIELDS
    assert (body["name"], body["revision"], body["version"], body["valid"], body["error"]) == (
        name, 1, "document-1", True, None,
    )  # fmt: skip
    assert body["document"] == DONE
    assert [state["path"] for state in body["compiled"]["states"]] == ["echo", "done"]


def test_an_invalid_document_is_400_with_its_code_and_pointer_and_nothing_is_saved(api):
    name = uid("doc")
    body = error(api.post("documents/", {"name": name, "document": {**DONE, "initial": "start"}}), 400,
                 "UNDECLARED_STATE")  # fmt: skip
    assert body["detail"] == {"pointer": "/initial"}
    assert "no state 'start' in this scope" in body["message"]
    body = error(api.post("documents/", {"name": name, "document": corpus.valid()}), 400, "UNKNOWN_TASK")
    assert body["detail"] == {"pointer": "/states/fetch/work/task"}  # the corpus' tasks are not registered here
    assert not WorkflowDocument.objects.filter(name=name).exists()


def test_a_10000_state_document_is_refused_over_http_with_its_pointer(api):
    document = corpus.chain(10_000, corpus._loop_back)
    for state in document["states"].values():
        if "work" in state:
            state["work"] = {"task": "t.echo", "version": "1"}
    body = error(api.post("documents/", {"name": uid("doc"), "document": document}), 400, "UNBOUNDED_CYCLE")
    assert body["detail"] == {"pointer": "/states/s0"}


def test_a_taken_name_is_409(api):
    name = uid("doc")
    api.post("documents/", {"name": name, "document": DONE})
    error(api.post("documents/", {"name": name, "document": DONE}), 409, "DOCUMENT_EXISTS")
    error(api.post("documents/", {"name": "t.steps", "document": DONE}), 409, "DOCUMENT_NAME_TAKEN")
    error(api.post("documents/", {"name": "a/b", "document": DONE}), 400, "INVALID_DOCUMENT_NAME")
    error(api.post("documents/", {"name": name, "document": DONE, "valid": True}), 400, "INVALID_REQUEST")


def test_put_saves_the_next_revision_and_the_same_document_keeps_its_own(api):
    name = uid("doc")
    api.post("documents/", {"name": name, "document": DONE})
    changed = {**DONE, "revision": "second"}
    response = api.put(f"documents/{name}/", {"document": changed})
    assert response.status_code == 200, response.content
    assert (response.json()["revision"], response.json()["document"]) == (2, changed)
    assert api.put(f"documents/{name}/", {"document": changed}).json()["revision"] == 2
    body = error(api.put(f"documents/{name}/", {"document": {**DONE, "states": {}}}), 400, "INVALID_MEMBER")
    assert body["detail"] == {"pointer": "/states"}
    error(api.put(f"documents/{uid('nothing')}/", {"document": DONE}), 404, "NOT_FOUND")


def test_reading_documents_their_revisions_and_one_revision(api):
    name = uid("doc")
    api.post("documents/", {"name": name, "document": DONE})
    api.put(f"documents/{name}/", {"document": {**DONE, "revision": "b"}})

    listed = [row for row in api.get("documents/?page_size=500").json()["results"] if row["name"] == name]
    assert [(row["revision"], row["valid"]) for row in listed] == [(2, True)]
    assert set(listed[0]) == REVISION_FIELDS - {"document", "compiled"}
    assert api.get(f"documents/{name}/").json()["revision"] == 2
    assert api.get(f"documents/{name}/?revision=1").json()["document"] == DONE
    revisions = api.get(f"documents/{name}/revisions/").json()
    assert [row["revision"] for row in revisions["results"]] == [2, 1]
    error(api.get(f"documents/{name}/?revision=9"), 404, "NOT_FOUND")
    error(api.get(f"documents/{name}/?revision=x"), 400, "INVALID_REQUEST")
    error(api.get(f"documents/{uid('nothing')}/"), 404, "NOT_FOUND")
    error(api.get(f"documents/{uid('nothing')}/revisions/"), 404, "NOT_FOUND")


def test_the_revisions_page_by_their_own_cursor_and_page_size(api):
    name = uid("doc")
    api.post("documents/", {"name": name, "document": DONE})
    for label in "bcd":
        api.put(f"documents/{name}/", {"document": {**DONE, "revision": label}})

    first = api.get(f"documents/{name}/revisions/?page_size=3").json()
    rest = api.client.get(first["next"])

    assert rest.status_code == 200, rest.content
    assert [row["revision"] for row in first["results"] + rest.json()["results"]] == [4, 3, 2, 1]
    assert rest.json()["next"] is None
    back = api.client.get(rest.json()["previous"]).json()
    assert [row["revision"] for row in back["results"]] == [4, 3, 2]
    error(api.get(f"documents/{name}/revisions/?page_size=%C2%B2"), 400, "INVALID_REQUEST")
    error(api.get(f"documents/{name}/revisions/?revision=1"), 400, "INVALID_REQUEST")


@pytest.mark.parametrize("revision", ["%C2%B2", "%E2%91%A0", "%D9%A1", "9" * 5000, "0", "-1", "+1", " 1", "1.0", "2147483648"])
def test_a_revision_is_ascii_digits_in_the_columns_range(api, revision):
    name = uid("doc")
    api.post("documents/", {"name": name, "document": DONE})
    body = error(api.get(f"documents/{name}/?revision={revision}"), 400, "INVALID_REQUEST")
    assert body["detail"] == {"revision": ["an integer from 1 to 2147483647"]}


def test_the_list_pages_by_name(api):
    names = sorted(uid("page") for _ in range(3))
    for name in names:
        api.post("documents/", {"name": name, "document": DONE})
    first = api.get("documents/?page_size=2").json()
    rest = api.client.get(first["next"]).json()
    seen = [row["name"] for row in first["results"] + rest["results"]]
    assert [name for name in seen if name in names] == names


def test_a_document_is_started_over_http_like_any_workflow(api, no_send):
    name = uid("doc")
    api.post("documents/", {"name": name, "document": DONE})
    workflows = {w["name"]: w for w in api.get("workflows/").json()["results"]}
    assert (workflows[name]["kind"], workflows[name]["version"]) == ("document", "document-1")
    response = api.post("executions/", {"workflow": name, "params": {"x": 1}})
    assert response.status_code == 201, response.content
    assert (response.json()["workflow"], response.json()["version"]) == (name, "document-1")
    assert Execution.objects.filter(workflow=name).count() == 1


def test_api_workflows_decides_for_documents_too(api):
    name = uid("doc")
    api.post("documents/", {"name": name, "document": DONE})
    with override_settings(DURABLEFLOW={"API_WORKFLOWS": ["t.steps"]}):
        error(api.post("executions/", {"workflow": name}), 404, "UNKNOWN_WORKFLOW")
        assert name not in {w["name"] for w in api.get("workflows/").json()["results"]}
