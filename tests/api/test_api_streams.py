"""``GET executions/{id}/streams/{stream_id}/``: JSON pages, Server-Sent Events, permissions."""

from __future__ import annotations

import json

import pytest

import durableflow
from durableflow import operations
from durableflow.api import streams as api_streams
from durableflow.models import Execution
from tests.apiclient import Api, error, make_user


def _run(n: int = 3) -> str:
    execution = durableflow.start("t.stream", {"n": n})
    for _ in range(5):
        operations.deliver(execution.id)
        if Execution.objects.get(pk=execution.id).is_finished:
            return execution.id
    raise AssertionError("the run did not finish")


def _events(response) -> list[tuple[str, str | None, str]]:
    """(event, id, data) of each event of a streamed answer; comments and retry left out."""
    text = b"".join(response.streaming_content).decode()
    events = []
    for block in text.split("\n\n"):
        fields = dict(line.split(": ", 1) for line in block.splitlines() if line and not line.startswith(":"))
        if "event" in fields:
            events.append((fields["event"], fields.get("id"), fields["data"]))
    return events


def test_a_page_holds_the_chunks_after_after_in_order(api):
    execution_id = _run(3)

    whole = api.get(f"executions/{execution_id}/streams/tokens/").json()
    rest = api.get(f"executions/{execution_id}/streams/tokens/?after=2").json()

    assert [(c["seq"], c["chunk"]) for c in whole["chunks"]] == [(1, "token 1"), (2, "token 2"), (3, "token 3")]
    assert set(whole["chunks"][0]) == {"seq", "chunk", "at"} and whole["done"] is True
    assert [c["seq"] for c in rest["chunks"]] == [3]
    log = api.get(f"executions/{execution_id}/streams/log/").json()
    assert [c["chunk"] for c in log["chunks"]] == ["started", {"tokens": 3}]
    assert api.get(f"executions/{execution_id}/streams/nothing-here/").json() == {"chunks": [], "done": True}


def test_an_unfinished_run_s_page_is_not_done(api):
    execution = durableflow.start("t.stream", {"n": 3})

    assert api.get(f"executions/{execution.id}/streams/tokens/").json() == {"chunks": [], "done": False}
    assert api.get(f"executions/{execution.id}/streams/tokens/?wait=0.05").json() == {"chunks": [], "done": False}


@pytest.mark.parametrize("after", ["-1", "x", "1.5", "²", "99999999999", ""])
def test_a_bad_after_is_400(api, after):
    execution_id = _run(1)

    error(api.get(f"executions/{execution_id}/streams/tokens/?after={after}"), 400, "INVALID_REQUEST")


def test_unknown_query_parameters_and_bad_stream_ids_are_400(api):
    execution_id = _run(1)

    error(api.get(f"executions/{execution_id}/streams/tokens/?from=1"), 400, "INVALID_REQUEST")
    error(api.get(f"executions/{execution_id}/streams/{'s' * 201}/"), 400, "INVALID_STREAM")
    error(api.get(f"executions/{execution_id}/streams/tokens/?wait=31"), 400, "INVALID_REQUEST")


def test_an_unknown_execution_is_404(api):
    error(api.get("executions/no-such-run/streams/tokens/"), 404, "NOT_FOUND")
    # An event stream's refusal is JSON in the one shape too.
    error(api.get("executions/no-such-run/streams/tokens/", HTTP_ACCEPT="text/event-stream"), 404, "NOT_FOUND")


@pytest.mark.parametrize("permissions", [(), ("add_execution", "change_execution")])
def test_a_caller_who_may_not_view_executions_learns_nothing(client, django_user_model, no_send, permissions):
    execution_id = _run(1)
    api = Api(client).login(make_user(django_user_model, "outsider", *permissions, staff=True))

    known = error(api.get(f"executions/{execution_id}/streams/tokens/"), 403, "PERMISSION_DENIED")
    unknown = error(api.get("executions/no-such-run/streams/tokens/"), 403, "PERMISSION_DENIED")

    assert known == unknown  # the same answer whether the execution exists or not
    assert api.get(f"executions/{execution_id}/streams/tokens/", HTTP_ACCEPT="text/event-stream").status_code == 403


def test_a_viewer_may_read_a_stream(client, django_user_model, no_send):
    execution_id = _run(2)
    api = Api(client).login(make_user(django_user_model, "viewer", "view_execution"))

    assert [c["seq"] for c in api.get(f"executions/{execution_id}/streams/tokens/").json()["chunks"]] == [1, 2]


def test_anonymous_callers_are_refused(client, no_send, db):
    response = Api(client).get("executions/any/streams/tokens/")
    assert response.status_code in (401, 403)


def test_server_sent_events_send_each_chunk_then_done(api):
    execution_id = _run(3)

    response = api.get(f"executions/{execution_id}/streams/tokens/", HTTP_ACCEPT="text/event-stream")

    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/event-stream")
    assert response["Cache-Control"] == "no-cache"
    events = _events(response)
    assert [(event, seq) for event, seq, _ in events] == [("chunk", "1"), ("chunk", "2"), ("chunk", "3"), ("done", None)]
    assert json.loads(events[0][2])["chunk"] == "token 1"


def test_server_sent_events_resume_after_the_last_event_id(api):
    execution_id = _run(3)

    response = api.get(
        f"executions/{execution_id}/streams/tokens/?after=0", HTTP_ACCEPT="text/event-stream", HTTP_LAST_EVENT_ID="2"
    )

    assert [(event, seq) for event, seq, _ in _events(response)] == [("chunk", "3"), ("done", None)]
    bad = api.get(f"executions/{execution_id}/streams/tokens/", HTTP_ACCEPT="text/event-stream", HTTP_LAST_EVENT_ID="x")
    error(bad, 400, "INVALID_REQUEST")


def test_an_event_stream_starts_with_retry_and_ends_within_its_time(api, monkeypatch):
    monkeypatch.setattr(api_streams, "SSE_SECONDS", 0.2)
    execution = durableflow.start("t.stream", {"n": 3})  # not delivered: nothing comes

    response = api.get(f"executions/{execution.id}/streams/tokens/", HTTP_ACCEPT="text/event-stream")

    text = b"".join(response.streaming_content).decode()
    assert text.startswith(f"retry: {api_streams.RETRY_MS}\n\n")
    assert "event:" not in text  # no chunk, and no done: the client reconnects
    error(api.get(f"executions/{execution.id}/streams/tokens/?wait=1", HTTP_ACCEPT="text/event-stream"),
          400, "INVALID_REQUEST")  # fmt: skip


def test_the_schema_documents_the_stream_endpoint(api):
    schema = api.get("schema/?format=json")
    assert schema.status_code == 200, schema.content[:300]
    operation = schema.json()["paths"]["/api/durableflow/executions/{id}/streams/{stream_id}/"]["get"]
    assert set(operation["responses"]["200"]["content"]) == {"application/json", "text/event-stream"}
    assert {p["name"] for p in operation["parameters"]} >= {"id", "stream_id", "after", "wait", "Last-Event-ID"}
    assert "Last-Event-ID" in operation["description"] and "view_execution" in operation["description"]
