"""The REST API's rerun and fork, and what an execution shows of its saga."""

from __future__ import annotations

import durableflow
from durableflow import operations
from durableflow.models import Execution, StepRecord
from tests.apiclient import PREFIX, error


def _finished(**fields) -> Execution:
    execution = durableflow.start("t.steps", {"n": 1})
    Execution.objects.filter(pk=execution.id).update(status="completed", result={"a": 1}, **fields)
    for key in ("a", "b", "c"):
        StepRecord.objects.create(execution_id=execution.id, key=key, kind="run", status="completed", attempts=1, value=1)
    return execution


def test_rerun_answers_201_with_the_new_linked_execution_and_its_location(api):
    origin = _finished()

    response = api.post(f"executions/{origin.id}/rerun/")

    assert response.status_code == 201, response.content
    body = response.json()
    assert (body["workflow"], body["params"], body["status"]) == ("t.steps", {"n": 1}, "pending")
    assert (body["origin_id"], body["origin_kind"], body["origin_step"]) == (origin.id, "rerun", None)
    assert response["Location"] == f"http://testserver{PREFIX}executions/{body['id']}/"
    assert api.get(f"executions/{body['id']}/").json()["origin_id"] == origin.id


def test_fork_keeps_the_journal_before_the_step(api):
    origin = _finished()

    response = api.post(f"executions/{origin.id}/fork/", {"from_step": "b"})

    assert response.status_code == 201, response.content
    body = response.json()
    assert (body["origin_id"], body["origin_kind"], body["origin_step"]) == (origin.id, "fork", "b")
    journal = api.get(f"executions/{body['id']}/journal/").json()["results"]
    assert [record["key"] for record in journal] == ["a"]
    assert response["Location"].endswith(f"/executions/{body['id']}/")


def test_fork_and_rerun_refusals_carry_their_codes(api):
    origin = _finished()
    running = durableflow.start("t.steps")

    error(api.post(f"executions/{origin.id}/fork/", {"from_step": "zzz"}), 400, "UNKNOWN_STEP")
    error(api.post(f"executions/{origin.id}/fork/", {}), 400, "INVALID_REQUEST")
    error(api.post(f"executions/{origin.id}/fork/", {"from_step": 3}), 400, "INVALID_REQUEST")
    error(api.post(f"executions/{origin.id}/rerun/", {"force": True}), 400, "INVALID_REQUEST")
    error(api.post(f"executions/{running.id}/rerun/"), 409, "NOT_FINISHED")
    error(api.post(f"executions/{running.id}/fork/", {"from_step": "a"}), 409, "NOT_FINISHED")
    error(api.post("executions/nope/rerun/"), 404, "NOT_FOUND")
    assert Execution.objects.count() == 2


def test_a_workflow_the_api_does_not_expose_cannot_be_rerun_over_it(api, settings):
    origin = _finished()
    settings.DURABLEFLOW = {**settings.DURABLEFLOW, "API_WORKFLOWS": ["t.ping"]}

    error(api.post(f"executions/{origin.id}/rerun/"), 404, "UNKNOWN_WORKFLOW")
    error(api.post(f"executions/{origin.id}/fork/", {"from_step": "b"}), 404, "UNKNOWN_WORKFLOW")


def test_an_execution_shows_its_cancel_request_and_compensation_report(api):
    execution = durableflow.start("t.steps")
    report = [{"step": "a", "status": "completed", "error": None, "duration": 0.01,
               "started_at": "2026-01-01T00:00:00+00:00", "finished_at": "2026-01-01T00:00:00.010000+00:00"}]  # fmt: skip
    Execution.objects.filter(pk=execution.id).update(
        status="cancelled", compensations=report, cancel_requested={"code": "CANCELLED", "message": "no"}
    )

    body = api.get(f"executions/{execution.id}/").json()

    assert body["compensations"] == report
    assert body["cancel_requested"] == {"code": "CANCELLED", "message": "no"}


def test_metadata_is_readable_live(api):
    execution = durableflow.start("t.metadata-progress", {"n": 3})
    operations.deliver(execution.id)  # counts, then waits for a signal

    body = api.get(f"executions/{execution.id}/").json()

    assert (body["status"], body["metadata"]) == ("waiting", {"done": 3, "stage": "waiting"})
