"""The execution page's Streams panel, and the JSON it polls."""

from __future__ import annotations

import json

import pytest
from django.urls import reverse

import durableflow
from durableflow.admin import streams as admin_streams
from tests.admin_support import page_url, run, staff, text

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("no_broker")]


def streams_url(execution_id: str, after: dict | None = None) -> str:
    url = reverse("admin:durableflow_execution_streams", args=[execution_id])
    return url if after is None else f"{url}?after={json.dumps(after)}"


def test_the_page_shows_each_stream_s_chunks(viewer):
    execution = run("t.stream", {"n": 3})

    page = text(viewer.get(page_url(execution.id)))

    assert "Streams" in page
    assert "tokens 3 chunks token 1 token 2 token 3" in page
    assert 'log 2 chunks started {"tokens":3}' in page
    assert "The run is finished" in page


def test_a_run_that_wrote_nothing_has_no_panel_once_finished(admin_client):
    finished = run("t.ping")
    unfinished = durableflow.start("t.stream", {"n": 1})

    assert "df-panel-streams" not in admin_client.get(page_url(finished.id)).content.decode()
    assert "df-panel-streams" in admin_client.get(page_url(unfinished.id)).content.decode()  # live: chunks may come


def test_the_poll_answers_the_chunks_after_those_shown(viewer):
    execution = run("t.stream", {"n": 3})

    answer = viewer.get(streams_url(execution.id, {"tokens": 2, "log": 2})).json()

    assert answer["done"] is True
    assert [c["seq"] for c in answer["streams"]["tokens"]["chunks"]] == [3]
    assert answer["streams"]["log"] == {"last": 2, "upto": 2, "skipped": 0, "chunks": []}


def test_a_long_stream_shows_its_last_chunks(admin_client, monkeypatch):
    monkeypatch.setattr(admin_streams, "PANEL_CHUNKS", 2)
    execution = run("t.stream", {"n": 5})

    answer = admin_client.get(streams_url(execution.id)).json()

    assert [c["seq"] for c in answer["streams"]["tokens"]["chunks"]] == [4, 5]
    assert answer["streams"]["tokens"]["skipped"] == 3


def test_the_page_asks_after_the_last_chunk_it_drew(admin_client, monkeypatch):
    """A chunk written between the streams' read and their chunks' read is drawn, and counted
    as drawn: the next poll does not send it again."""
    execution = run("t.stream", {"n": 3})
    real = admin_streams.operations.engine

    def engine():
        verbs = real()
        stream_ids = verbs.stream_ids
        verbs.stream_ids = lambda execution_id: {**stream_ids(execution_id), "tokens": 2}  # read before chunk 3
        return verbs

    monkeypatch.setattr(admin_streams.operations, "engine", engine)
    tokens = admin_client.get(streams_url(execution.id)).json()["streams"]["tokens"]

    assert [c["seq"] for c in tokens["chunks"]] == [1, 2, 3]
    assert (tokens["upto"], tokens["last"]) == (3, 3)


def test_a_large_chunk_is_cut_short():
    assert admin_streams.shown("x" * 5000) == "x" * admin_streams.SHOWN_CHARACTERS + "…"
    assert admin_streams.shown({"a": [1, 2]}) == '{"a":[1,2]}'


@pytest.mark.parametrize("after", ["[]", "{", '{"tokens": -1}', '{"tokens": "1"}', '{"tokens": true}'])
def test_a_bad_position_is_400(admin_client, after):
    execution = run("t.stream", {"n": 1})

    response = admin_client.get(f"{streams_url(execution.id)}?after={after}")

    assert response.status_code == 400 and response.json()["code"] == "INVALID_REQUEST"


def test_the_poll_needs_the_view_permission(client, django_user_model):
    execution = run("t.stream", {"n": 1})
    client.force_login(staff(django_user_model, "steerer", "change_steprecord"))

    assert client.get(streams_url(execution.id)).status_code == 403
    assert client.get(streams_url("no-such-run")).status_code == 403  # the same whether it exists or not


def test_an_unknown_execution_is_404(admin_client):
    assert admin_client.get(streams_url("no-such-run")).status_code == 404
