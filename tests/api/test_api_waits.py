"""``events/``, ``tokens/{token}/complete/`` and ``executions/{id}/signals/`` over HTTP."""

from __future__ import annotations

from urllib.parse import quote

import pytest

import durableflow
from durableflow import operations
from durableflow.models import Event, Execution
from tests.apiclient import Api, error, make_user


def _waiting(workflow: str, params=None) -> str:
    execution = durableflow.start(workflow, params)
    operations.deliver(execution.id)
    assert Execution.objects.get(pk=execution.id).status == "waiting"
    return execution.id


def test_an_event_is_published_once_per_event_id(api):
    execution_id = _waiting("t.wait-event", {"match": {"order": "http-1"}})

    first = api.post("events/", {"type": "t.event", "payload": {"order": "http-1"}, "event_id": "http-e1"})
    again = api.post("events/", {"type": "t.event", "payload": {"order": "http-1"}, "event_id": "http-e1"})

    assert (first.status_code, first.json()) == (200, {"satisfied": 1})
    assert (again.status_code, again.json()) == (200, {"satisfied": 0})
    assert Event.objects.filter(event_id="http-e1").count() == 1
    assert Execution.objects.get(pk=execution_id).status == "pending"


def test_event_refusals_carry_the_engines_codes(api):
    error(api.post("events/", {"type": "", "payload": {}}), 400, "INVALID_EVENT")
    error(api.post("events/", {"type": "t\u0000x"}), 400, "INVALID_EVENT")
    error(api.post("events/", {"type": "t.event", "payload": {"n": 1}, "extra": 1}), 400, "INVALID_REQUEST")
    error(api.post("events/", {"payload": {}}), 400, "INVALID_REQUEST")
    error(api.post("events/", {"type": "t.event", "payload": {"n": 2**70}}), 400, "INVALID_PAYLOAD")


def test_a_token_is_completed_once_and_an_unknown_one_is_not_found(api):
    execution_id = _waiting("t.token")
    token = quote(f"{execution_id}:approve", safe="")

    done = api.post(f"tokens/{token}/complete/", {"payload": {"ok": True}})

    assert (done.status_code, done.json()) == (200, {"satisfied": 1})
    error(api.post(f"tokens/{token}/complete/", {"payload": {"ok": False}}), 409, "TOKEN_ALREADY_COMPLETED")
    error(api.post("tokens/nobody-waits/complete/", {}), 404, "TOKEN_NOT_FOUND")


def test_a_token_with_a_slash_in_its_key_is_reached(api):
    execution = durableflow.start("t.token")  # not delivered: its default token names it
    token = quote(f"{execution.id}:approve/with/slashes", safe="")
    assert api.post(f"tokens/{token}/complete/", {}).json() == {"satisfied": 0}
    assert Event.objects.filter(kind="token", name=f"{execution.id}:approve/with/slashes").exists()


def test_signals_are_sent_to_an_unfinished_execution(api):
    execution_id = _waiting("t.wait-signal")

    sent = api.post(f"executions/{execution_id}/signals/", {"name": "go", "payload": "now"})

    assert (sent.status_code, sent.json()) == (200, {"satisfied": 1})
    error(api.post("executions/nobody/signals/", {"name": "go"}), 404, "NOT_FOUND")
    error(api.post(f"executions/{execution_id}/signals/", {"payload": 1}), 400, "INVALID_REQUEST")
    operations.deliver(execution_id)
    error(api.post(f"executions/{execution_id}/signals/", {"name": "go"}), 409, "INVALID_TRANSITION")


@pytest.mark.parametrize(
    ("path", "body", "permission"),
    [
        ("events/", {"type": "t.event"}, "change_execution"),
        ("tokens/nobody-waits/complete/", {}, "change_execution"),
        ("executions/nobody/signals/", {"name": "go"}, "change_execution"),
    ],
)
def test_each_endpoint_needs_its_model_permission(db, client, django_user_model, no_send, path, body, permission):
    without = Api(client).login(make_user(django_user_model, "without", "view_execution"))
    error(without.post(path, body), 403, "PERMISSION_DENIED")
    allowed = Api(client).login(make_user(django_user_model, "allowed", permission))
    assert allowed.post(path, body).status_code in (200, 404)
