"""The registry's sources: documents found by name beside code, each run pinned to a revision;
and the documents package stays plain Python."""

from __future__ import annotations

import subprocess
import sys

import pytest

from durableflow import DocumentError, WorkflowStartError
from durableflow.documents.source import MemoryDocuments, revision_of, version_of
from durableflow.registry import Registry, WorkflowDefinition
from tests.cluster import ROOT

DONE = {"$workflow": "0.2", "initial": "done", "states": {"done": {"final": True}}}


def test_a_layered_registry_finds_code_first_then_documents():
    base = Registry()
    documents = MemoryDocuments(base)
    layered = base.layered(documents)
    documents.save("shared-name", DONE)
    assert layered.resolve("shared-name").kind == "document"
    base.register(WorkflowDefinition("shared-name", lambda ctx, params: None))  # code registered later
    assert layered.resolve("shared-name").kind == "code"
    assert [d.kind for d in layered.all()] == ["code"]
    with pytest.raises(DocumentError) as refused:
        documents.save("shared-name", DONE)
    assert refused.value.code == "DOCUMENT_NAME_TAKEN"


def test_a_pinned_version_finds_its_revision_and_nothing_else():
    documents = MemoryDocuments(Registry())
    documents.save("d", DONE)
    documents.save("d", {**DONE, "revision": "b"})
    assert documents.get("d").version == "document-2"
    assert documents.get("d", "document-1").fn.revision == 1
    assert documents.get("d", "document-3") is None
    assert documents.get("d", "1") is None
    assert documents.get("d\x00", None) is None
    assert (revision_of(version_of(12)), revision_of("document-x"), revision_of(None)) == (12, None, None)


def test_an_unknown_name_is_an_unknown_workflow():
    layered = Registry().layered(MemoryDocuments(Registry()))
    with pytest.raises(WorkflowStartError) as refused:
        layered.resolve("nothing")
    assert refused.value.code == "UNKNOWN_WORKFLOW"


def test_the_documents_package_imports_no_django_and_no_celery():
    script = (
        "import sys, durableflow.documents.interpreter, durableflow.documents.source, durableflow.documents.diagram; "
        "bad = sorted({m.split('.')[0] for m in sys.modules} & {'django', 'celery', 'kombu', 'rest_framework'}); "
        "print(','.join(bad))"
    )
    found = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, check=True)
    assert found.stdout.strip() == ""


def test_the_tester_runs_documents_in_memory():
    from durableflow.testing import WorkflowTester
    from tests.testapp import document_tasks  # noqa: F401 - registers t.double

    tester = WorkflowTester()
    tester.save_document("tester.doc", {"$workflow": "0.2", "initial": "twice", "states": {
        "twice": {"work": {"task": "t.double", "version": "1"}, "then": "pause"},
        "pause": {"on": [], "after": {"ms": 3600000, "to": "done"}},
        "done": {"final": True},
    }})  # fmt: skip
    execution = tester.start("tester.doc", 21)
    assert tester.run_until_finished(execution.id) == 42
    assert [r.key for r in tester.records(execution.id) if r.kind != "trace"] == ["twice@1", "pause@1"]
