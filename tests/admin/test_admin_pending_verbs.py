"""Admin actions over the waits' verbs (signal, complete token) and the sagas' (rerun, fork):
the admin side against stand-in verbs, then each end to end; the compensation report."""

from __future__ import annotations

import pytest

import durableflow
from durableflow import operations
from durableflow.models import Execution, StepRecord
from tests.admin_support import action_url, page_url, run, text

pytestmark = pytest.mark.usefixtures("no_broker")


def test_send_signal_calls_the_verb_with_the_parsed_payload(db, admin_client, monkeypatch):
    sent = []
    monkeypatch.setattr(operations, "signal", lambda *args: sent.append(args), raising=False)
    execution = run("t.timer", {"seconds": 3600})

    form = admin_client.get(action_url(execution.id, "signal")).content.decode()
    response = admin_client.post(action_url(execution.id, "signal"), {"name": "approve", "payload": '{"ok": true}'})

    assert 'name="payload"' in form and 'name="name"' in form
    assert response.status_code == 302
    assert sent == [(execution.id, "approve", {"ok": True})]


def test_complete_token_is_offered_to_a_token_wait_with_the_token_filled_in(db, admin_client, monkeypatch):
    completed = []
    monkeypatch.setattr(operations, "complete_token", lambda *args: completed.append(args), raising=False)
    execution = run("t.timer", {"seconds": 3600})
    Execution.objects.filter(pk=execution.id).update(waiting_for={"kind": "token", "step": "ok", "token": "tok-1"})

    page = admin_client.get(page_url(execution.id)).content.decode()
    form = admin_client.get(action_url(execution.id, "complete-token")).content.decode()
    admin_client.post(action_url(execution.id, "complete-token"), {"token": "tok-1", "payload": '{"approved": 1}'})

    assert 'data-action="complete-token"' in page
    assert 'value="tok-1"' in form
    assert completed == [("tok-1", {"approved": 1})]


def test_rerun_and_fork_lead_to_the_new_execution(db, admin_client, monkeypatch):
    execution = run("t.steps")
    monkeypatch.setattr(operations, "rerun", lambda execution_id: durableflow.start("t.steps"), raising=False)
    forks = []

    def fork(execution_id, *, from_step):
        forks.append((execution_id, from_step))
        return durableflow.start("t.steps")

    monkeypatch.setattr(operations, "fork", fork, raising=False)

    page = admin_client.get(page_url(execution.id)).content.decode()
    fork_form = admin_client.get(action_url(execution.id, "fork") + "?from_step=b").content.decode()
    rerun = admin_client.post(action_url(execution.id, "rerun"))
    forked = admin_client.post(action_url(execution.id, "fork"), {"from_step": "b"})

    assert f'href="{action_url(execution.id, "fork")}?from_step=b"' in page  # "fork" on the timeline row
    assert '<option value="b" selected>b</option>' in fork_form
    newest = list(Execution.objects.exclude(pk=execution.id).order_by("created_at", "id").values_list("id", flat=True))
    assert {rerun["Location"], forked["Location"]} == {page_url(new) for new in newest}
    assert forks == [(execution.id, "b")]


def test_an_action_whose_verb_does_not_exist_is_not_offered(db, admin_client, monkeypatch):
    monkeypatch.delattr(operations, "signal", raising=False)
    execution = run("t.timer", {"seconds": 3600})

    assert 'data-action="signal"' not in admin_client.get(page_url(execution.id)).content.decode()
    assert admin_client.get(action_url(execution.id, "signal")).status_code == 404


# The same actions end to end ------------------------------------------------------------------------------


def test_complete_token_from_the_admin_form_ends_the_wait(db, admin_client):
    """A run waits in ``ctx.step.wait_for_token("approve")``; its token is completed from the
    page's form with a JSON payload; the payload is the step's value."""
    execution = run("t.token")
    token = f"{execution.id}:approve"
    page = admin_client.get(page_url(execution.id)).content.decode()

    admin_client.post(action_url(execution.id, "complete-token"), {"token": token, "payload": '{"approved": 1}'})
    operations.deliver(execution.id)

    assert 'data-action="complete-token"' in page
    done = Execution.objects.get(pk=execution.id)
    assert (done.status, done.result) == ("completed", {"approved": 1})
    assert StepRecord.objects.get(execution_id=execution.id, key="approve").value == {"approved": 1}


def test_send_signal_from_the_admin_form_ends_the_wait(db, admin_client):
    """A run waits in ``ctx.step.wait_for_signal("go", "go")``; the signal is sent from the
    page's form; the payload is the step's value."""
    execution = run("t.wait-signal")

    admin_client.post(action_url(execution.id, "signal"), {"name": "go", "payload": '"now"'})
    operations.deliver(execution.id)

    done = Execution.objects.get(pk=execution.id)
    assert (done.status, done.result) == ("completed", "now")
    assert StepRecord.objects.get(execution_id=execution.id, key="go").value == "now"


def test_rerun_from_the_admin_starts_a_new_execution_with_the_same_params(db, admin_client):
    """Rerun a completed run from its page; the new execution has the same workflow and params
    and links back to the first one."""
    execution = run("t.loop", {"n": 3})

    response = admin_client.post(action_url(execution.id, "rerun"))

    rerun = Execution.objects.get(origin_id=execution.id)
    assert response.status_code == 302 and response["Location"] == page_url(rerun.id)
    assert (rerun.workflow, rerun.params, rerun.origin_kind) == ("t.loop", {"n": 3}, "rerun")
    operations.deliver(rerun.id)
    assert Execution.objects.get(pk=rerun.id).result == 3
    page = admin_client.get(page_url(rerun.id)).content.decode()
    assert f'href="{page_url(execution.id)}"' in page and "rerun of" in page
    origin_page = admin_client.get(page_url(execution.id)).content.decode()
    assert f'href="{page_url(rerun.id)}"' in origin_page  # "Reruns and forks" panel


def test_fork_from_a_timeline_row_keeps_the_journal_before_that_step(db, admin_client):
    """Fork from step "b" of a completed t.steps run; the new execution's journal holds "a"
    only until it runs, and it completes with the same result."""
    execution = run("t.steps")

    response = admin_client.post(action_url(execution.id, "fork"), {"from_step": "b"})

    fork = Execution.objects.get(origin_id=execution.id)
    assert response["Location"] == page_url(fork.id)
    assert (fork.origin_kind, fork.origin_step) == ("fork", "b")
    assert list(StepRecord.objects.filter(execution_id=fork.id).values_list("key", flat=True)) == ["a"]
    operations.deliver(fork.id)
    assert Execution.objects.get(pk=fork.id).result == execution.result
    assert list(StepRecord.objects.filter(execution_id=fork.id).order_by("id").values_list("key", flat=True)) == [
        "a",
        "b",
        "c",
    ]


def test_rerun_and_fork_are_offered_on_finished_runs_only(db, admin_client):
    waiting = run("t.timer", {"seconds": 3600})
    page = admin_client.get(page_url(waiting.id)).content.decode()

    assert 'data-action="rerun"' not in page and 'data-action="fork"' not in page
    refused = admin_client.post(action_url(waiting.id, "rerun"), follow=True).content.decode()
    assert "Rerun refused" in refused and "only a finished execution" in refused
    assert not Execution.objects.filter(origin_id=waiting.id).exists()


def test_the_compensation_report_is_shown_on_the_page(db, admin_client):
    execution = run("t.saga-trip", {"tag": "admin", "fail": True})
    assert execution.status == "compensated"

    page = text(admin_client.get(page_url(execution.id)))

    assert "Compensations" in page
    assert page.index("hotel completed") < page.index("flight completed")


def test_a_cancel_with_compensations_shows_it_is_under_way(db, admin_client):
    execution = run("t.saga-trip", {"tag": "admin-cancel"})
    admin_client.post(action_url(execution.id, "cancel"), {"reason": "no longer needed"})

    page = text(admin_client.get(page_url(execution.id)))
    assert "cancel requested (no longer needed)" in page
    operations.deliver(execution.id)
    done = Execution.objects.get(pk=execution.id)
    assert (done.status, [c["step"] for c in done.compensations]) == ("cancelled", ["hotel", "flight"])
