"""Workflow documents in the database: revisions, the registry's source, starts by name."""

from __future__ import annotations

import pytest

import durableflow
from durableflow import DocumentError, ExecutionNotFound, dispatch, operations
from durableflow.models import WorkflowDocument
from durableflow.orm import documents
from tests.helpers import uid


@pytest.fixture
def published(monkeypatch):
    sent: list[tuple] = []
    monkeypatch.setattr(dispatch, "publish", lambda message: sent.append((*message.args, message.queue)) or True)
    return sent


def echo_then(then_version: str = "1", **more) -> dict:
    return {
        "$workflow": "0.2",
        "initial": "a",
        "states": {
            "a": {"work": {"task": "t.echo", "version": then_version}, "then": "done"},
            "done": {"final": True},
            **more,
        },
    }


def test_saving_makes_revisions_and_the_same_document_is_not_saved_twice(db):
    name = uid("doc")
    first, created = operations.save_document(name, echo_then())
    assert (first.revision, created, first.valid, first.version) == (1, True, True, "document-1")
    assert first.compiled["states"][0]["path"] == "a"
    again, created = operations.save_document(name, echo_then())
    assert (again.pk, created) == (first.pk, False)
    second, created = operations.save_document(name, echo_then("2"))
    assert (second.revision, created) == (2, True)
    assert list(WorkflowDocument.objects.named(name).values_list("revision", flat=True)) == [2, 1]


def test_an_invalid_document_saves_nothing(db):
    name = uid("doc")
    with pytest.raises(DocumentError) as refused:
        operations.save_document(name, echo_then(**{"b": {"choose": [{"guard": "x", "to": "done"}]}}))
    assert (refused.value.code, refused.value.pointer) == ("MISSING_OTHERWISE", "/states/b/otherwise")
    assert not WorkflowDocument.objects.filter(name=name).exists()


def test_new_refuses_a_taken_name_and_an_update_needs_an_existing_one(db):
    name = uid("doc")
    operations.save_document(name, echo_then(), new=True)
    with pytest.raises(DocumentError) as refused:
        operations.save_document(name, echo_then("2"), new=True)
    assert refused.value.code == "DOCUMENT_EXISTS"
    with pytest.raises(ExecutionNotFound):
        operations.save_document(uid("doc"), echo_then(), new=False)


def test_a_document_cannot_take_a_code_workflows_name(db):
    with pytest.raises(DocumentError) as refused:
        operations.save_document("t.steps", echo_then())
    assert refused.value.code == "DOCUMENT_NAME_TAKEN"
    with pytest.raises(DocumentError) as refused:
        operations.save_document(" ", echo_then())
    assert refused.value.code == "INVALID_DOCUMENT_NAME"


def test_a_document_is_started_by_name_and_run_by_the_engine(db, published):
    name = uid("doc")
    operations.save_document(name, echo_then())
    execution = durableflow.start(name, {"hello": "world"})
    assert (execution.workflow, execution.version) == (name, "document-1")
    assert operations.deliver(execution.id) == "completed"
    execution.refresh_from_db()
    assert execution.result == {"hello": "world"}
    kinds = list(execution.steps.values_list("key", "kind"))
    # The delivery's trace records are written together, after its steps.
    assert kinds == [("a@1", "run"), ("$trace:1", "trace"), ("$trace:2", "trace")]


def test_a_start_runs_the_newest_valid_revision(db, published):
    name = uid("doc")
    operations.save_document(name, echo_then())
    # A fixture's row is compiled on first use; an invalid one is passed over.
    WorkflowDocument.objects.create(name=name, revision=2, document={"$workflow": "0.2"})
    execution = durableflow.start(name, 1)
    assert execution.version == "document-1"
    row = WorkflowDocument.objects.get(name=name, revision=2)
    assert (row.valid, row.error["code"], row.error["pointer"]) == (False, "MISSING_MEMBER", "/states")
    WorkflowDocument.objects.create(name=name, revision=3, document=echo_then("2"))
    assert durableflow.start(name, 2).version == "document-3"
    assert WorkflowDocument.objects.get(name=name, revision=3).valid is True


def test_an_unknown_name_is_still_an_unknown_workflow(db):
    with pytest.raises(durableflow.WorkflowStartError) as refused:
        durableflow.start(uid("nothing"))
    assert refused.value.code == "UNKNOWN_WORKFLOW"


def test_a_running_execution_keeps_its_revision_after_an_edit(db, published):
    name = uid("doc")
    document = echo_then()
    document["states"]["a"]["then"] = "pause"
    document["states"]["pause"] = {"on": [], "after": {"ms": 0, "to": "done"}}
    operations.save_document(name, document)
    execution = durableflow.start(name, "x")
    operations.save_document(name, echo_then("2"))
    assert operations.deliver(execution.id) == "completed"
    execution.refresh_from_db()
    assert (execution.version, execution.result) == ("document-1", "x")


def test_the_registry_lists_documents_beside_code(db):
    name = uid("doc")
    operations.save_document(name, echo_then())
    operations.save_document(name, echo_then("2"))
    listed = {d.name: d for d in documents.registry.all()}
    assert (listed[name].kind, listed[name].version) == ("document", "document-2")
    assert listed["t.steps"].kind == "code"


def test_validating_again_records_a_verdict_without_touching_a_compiled_form(db):
    name = uid("doc")
    row, _ = operations.save_document(name, echo_then())
    compiled = row.compiled
    from durableflow.documents.tasks import tasks
    from tests.testapp import document_tasks  # noqa: F401

    task = tasks.get("t.echo", "1")
    tasks.unregister("t.echo", "1")
    try:
        assert documents.validate_again(WorkflowDocument.objects.filter(pk=row.pk)) == {"valid": 0, "invalid": 1}
    finally:
        tasks.register(task)
    row.refresh_from_db()
    assert (row.valid, row.error["code"], row.compiled) == (False, "UNKNOWN_TASK", compiled)
