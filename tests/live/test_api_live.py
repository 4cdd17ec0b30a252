"""The REST API end to end, on real worker processes: start over HTTP, long-poll, read the
journal, cancel, retry; 20 concurrent identical starts make one execution."""

from __future__ import annotations

import base64
import threading

import pytest
from django.db import connections
from django.test import Client

from durableflow.models import Execution
from tests.apiclient import Api, error, make_user
from tests.helpers import uid, wait_status


@pytest.fixture
def user(live_db):
    """A superuser with a password, committed (not django_user_model: it opens a test transaction)."""
    from django.contrib.auth import get_user_model

    user = make_user(get_user_model(), uid("api"), superuser=True)
    yield user
    user.delete()


def _basic(user) -> dict[str, str]:
    return {"HTTP_AUTHORIZATION": "Basic " + base64.b64encode(f"{user.username}:pw".encode()).decode()}


def test_start_long_poll_journal_cancel_and_retry_all_over_http(cluster, user):
    api = Api(Client()).login(user)

    # Start, then long-poll until the worker finished it.
    started = api.post("executions/", {"workflow": "t.steps", "params": {"n": 1}})
    assert started.status_code == 201, started.content
    execution_id = started.json()["id"]
    finished = api.get(f"executions/{execution_id}/?wait=30").json()
    assert (finished["status"], finished["result"]) == ("completed", {"a": 1, "b": 2, "c": {"sum": 3}})
    journal = api.get(f"executions/{execution_id}/journal/").json()["results"]
    assert [(r["key"], r["status"], r["value"]) for r in journal] == [
        ("a", "completed", 1),
        ("b", "completed", 2),
        ("c", "completed", {"sum": 3}),
    ]

    # Cancel a run asleep on a durable timer; it never runs again.
    sleeper = api.post("executions/", {"workflow": "t.timer", "params": {"seconds": 600}}).json()["id"]
    wait_status(sleeper, "waiting")
    cancelled = api.post(f"executions/{sleeper}/cancel/", {"reason": "over HTTP"})
    assert cancelled.json()["status"] == "cancelled"
    error(api.post(f"executions/{sleeper}/retry/"), 409, "INVALID_TRANSITION")

    # Retry a failed run: it resumes from the failed step, whose fresh attempt succeeds.
    tag = uid("fail-once")
    failing = api.post("executions/", {"workflow": "t.api-fail-once", "params": {"tag": tag}}).json()["id"]
    failed = api.get(f"executions/{failing}/?wait=30").json()
    assert failed["status"] == "failed" and "first attempt fails" in failed["error"]["message"]
    assert api.post(f"executions/{failing}/retry/").json()["status"] == "pending"
    resumed = api.get(f"executions/{failing}/?wait=30").json()
    assert (resumed["status"], resumed["result"]) == ("completed", "ok")
    assert Execution.objects.get(pk=sleeper).status == "cancelled"


def test_twenty_concurrent_identical_starts_make_one_execution(cluster, user):
    key, barrier, answers = uid("concurrent"), threading.Barrier(20), []

    def start() -> None:
        try:
            barrier.wait(timeout=30)
            response = Api(Client()).post(
                "executions/", {"workflow": "t.steps", "params": {"n": 20}}, HTTP_IDEMPOTENCY_KEY=key, **_basic(user)
            )
            answers.append((response.status_code, response.json().get("id") or response.json()))
        finally:
            connections.close_all()

    threads = [threading.Thread(target=start) for _ in range(20)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)

    assert sorted(status for status, _ in answers) == [200] * 19 + [201], answers
    assert len({execution_id for _, execution_id in answers}) == 1
    assert Execution.objects.filter(idempotency_key=key).count() == 1
    wait_status(answers[0][1], "completed")


def test_send_an_event_and_complete_a_token_over_http(cluster, user):
    api = Api(Client()).login(user)
    order = uid("order")
    execution_id = api.post("executions/", {"workflow": "t.api-approval", "params": {"order": order}}).json()["id"]
    wait_status(execution_id, "waiting")

    sent = api.post("events/", {"type": "order.approved", "payload": {"order": order, "by": "ann"}})
    assert sent.status_code in (200, 201), sent.content
    token = f"{execution_id}:sign-off"
    wait_status(execution_id, "waiting")  # now on the token
    assert api.post(f"tokens/{token}/complete/", {"payload": {"signed": True}}).status_code == 200
    error(api.post(f"tokens/{token}/complete/", {"payload": {"signed": True}}), 409, "TOKEN_ALREADY_COMPLETED")

    done = api.get(f"executions/{execution_id}/?wait=30").json()
    assert done["result"] == {"approved": {"order": order, "by": "ann"}, "signed": {"signed": True}}
