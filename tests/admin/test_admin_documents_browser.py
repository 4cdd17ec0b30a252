"""A workflow document written in the admin, in a real browser (headless Chromium): refused at
its member, corrected, saved, drawn, and run on the workers."""

from __future__ import annotations

import json

import pytest
from django.urls import reverse

import durableflow
from durableflow.models import WorkflowDocument
from tests.browser import missing_browser
from tests.helpers import uid, wait_status

MISSING = missing_browser()

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(MISSING is not None, reason=f"browser tests skipped: {MISSING}"),
]

DOCUMENT = {"$workflow": "0.2", "revision": "r1", "initial": "total", "states": {
    "total": {"work": {"task": "t.total", "version": "1"}, "then": "check", "catch": "failed"},
    "check": {"choose": [{"guard": "data.total > `100`", "to": "approve"}], "otherwise": "ship"},
    "approve": {"on": [], "after": {"ms": 1000, "to": "ship"}},
    "ship": {"flow": {"initial": "pack", "states": {
        "pack": {"work": {"task": "t.echo", "version": "1"}, "then": "packed"},
        "packed": {"final": True},
    }}, "then": "done"},
    "done": {"final": True},
    "failed": {"final": True},
}}  # fmt: skip


def test_write_a_document_see_its_problem_fix_it_and_run_it(cluster, page, admin_server, artifacts):
    name = uid("doc")
    broken = json.loads(json.dumps(DOCUMENT))
    del broken["states"]["check"]["otherwise"]
    page.goto(f"{admin_server.url}{reverse('admin:durableflow_workflowdocument_add')}")
    page.fill("#id_name", name)
    page.fill("#id_document", json.dumps(broken, indent=2))
    page.click("input[name=_save]")

    assert "MISSING_OTHERWISE at /states/check/otherwise" in page.locator(".errorlist").inner_text()
    marked = page.locator("mark.df-problem").inner_text()
    assert marked.startswith('"check": {') and "data.total" in marked
    assert not WorkflowDocument.objects.filter(name=name).exists()
    artifacts.screenshot(page, "admin-document-refused")

    page.fill("#id_document", json.dumps(DOCUMENT, indent=2))
    page.click("input[name=_save]")
    assert f"Saved {name} #1" in page.locator("ul.messagelist").inner_text()
    states = page.locator("svg.durableflow-statechart g.state").evaluate_all("gs => gs.map(g => g.dataset.path)")
    assert states == ["total", "check", "approve", "ship", "done", "failed", "ship/pack", "ship/packed"]
    assert page.locator("svg.durableflow-statechart g.transition").count() == 8
    artifacts.screenshot(page, "admin-document")

    execution = durableflow.start(name, {"id": 1, "items": [80, 40]})
    done = wait_status(execution.id, timeout=60)
    assert (done.version, done.result) == ("document-1", {"id": 1, "total": 120})
