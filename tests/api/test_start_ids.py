"""Execution ids a caller chooses: refused at start, with nothing written, when no URL could
name the execution (a slash, a control character, "." or ".."), on both storages and over the
REST API alike; every id that is accepted is found again at ``executions/<id>/``."""

from __future__ import annotations

from urllib.parse import quote

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from durableflow import WorkflowStartError
from tests.apiclient import error

UNROUTABLE = ["a/b", "/", "x/", "a\nb", "tab\there", "\x7f", "c1\x85", "\x1b[31m", ".", ".."]
ROUTABLE = ["a.b", "...", "a b", " lead", "trail ", "%2F", "a?b#c", "é—漢字", "\U0001f600", "a\\b", "~:@!$&'()*+,;="]


@pytest.mark.parametrize("execution_id", UNROUTABLE)
def test_an_id_no_url_could_carry_is_refused_at_start_on_every_storage(backend, execution_id):
    before = set(backend.storage.execution_ids())
    with pytest.raises(WorkflowStartError, match="no URL of the execution could carry") as refused:
        backend.start("t.steps", {"n": 1}, execution_id=execution_id)
    assert refused.value.code == "INVALID_PARAMS"
    assert set(backend.storage.execution_ids()) == before


@pytest.mark.parametrize("execution_id", ROUTABLE)
def test_other_ids_are_taken(backend, execution_id):
    assert backend.start("t.steps", {"n": 1}, execution_id=execution_id) == execution_id


@pytest.mark.parametrize("execution_id", UNROUTABLE)
def test_the_api_refuses_them_with_a_code(api, execution_id):
    body = error(api.post("executions/", {"workflow": "t.steps", "execution_id": execution_id}), 400, "INVALID_PARAMS")
    assert "no URL of the execution could carry" in body["message"]


@settings(max_examples=60, deadline=None, database=None, suppress_health_check=list(HealthCheck))
@given(execution_id=st.text(min_size=1, max_size=40))
@example(execution_id="a.b")
@example(execution_id="%2F")
def test_every_id_the_api_accepts_is_found_at_its_url(api, execution_id):
    started = api.post("executions/", {"workflow": "t.steps", "execution_id": execution_id})
    if started.status_code not in (200, 201):  # 200: an example hypothesis tried before
        error(started, 400, "INVALID_PARAMS")
        return
    assert started.json()["id"] == execution_id
    found = api.get(f"executions/{quote(execution_id, safe='')}/")
    assert found.status_code == 200, (execution_id, found.content)
    assert found.json()["id"] == execution_id
    assert api.client.get(started["Location"]).json()["id"] == execution_id
