"""The admin's pages and actions (Django's test client; the browser tests drive real workers):
read-only record pages, the journal timeline, and actions behind confirmation pages."""

from __future__ import annotations

import re

import pytest
from django.urls import reverse

import durableflow
from durableflow import dispatch, operations
from durableflow.models import Execution
from tests.admin_support import CHANGELIST, action_url, failed_run, page_url, run, text
from tests.harness import OrmHarness
from tests.testapp.models import Marker

pytestmark = pytest.mark.usefixtures("no_broker")

# Pages -------------------------------------------------------------------------------------------


def test_the_execution_page_draws_the_journal_as_a_timeline(db, admin_client):
    execution = run("t.steps")

    body = admin_client.get(page_url(execution.id)).content.decode()

    assert re.findall(r'<tr class="df-step df-step-(\w+)" data-key="([^"]+)"', body) == [
        ("completed", "a"),
        ("completed", "b"),
        ("completed", "c"),
    ]
    bars = re.findall(r'class="df-bar df-bar-completed" style="margin-left: ([\d.]+)%; width: ([\d.]+)%"', body)
    assert len(bars) == 3 and all(0 <= float(left) and float(left) + float(width) <= 100.001 for left, width in bars)
    assert '<pre class="df-json">{\n  &quot;sum&quot;: 3\n}</pre>' in body  # step c's value, pretty-printed
    assert 'class="df-status df-status-completed"' in body


def test_the_execution_page_shows_params_result_and_the_error_with_its_traceback(db, admin_client):
    execution = failed_run("page")

    response = admin_client.get(page_url(execution.id))
    page = text(response)

    assert "STEP_FAILED the payment service said no" in page
    assert "type builtins.ValueError · step charge" in page
    assert '<pre class="df-traceback">Traceback (most recent call last)' in response.content.decode()
    assert '"tag": "page"' in page  # params
    assert 'class="df-step df-step-failed" data-key="charge"' in response.content.decode()


def test_a_waiting_execution_says_what_it_waits_for_and_until_when(db, admin_client):
    execution = run("t.timer", {"seconds": 3600})
    assert execution.status == "waiting"

    listing = text(admin_client.get(reverse(CHANGELIST) + "?status__exact=waiting"))
    page = text(admin_client.get(page_url(execution.id)))

    until = execution.wake_at.strftime("%Y-%m-%d %H:%M:%S")
    assert f"timer · step timer · until {until}" in listing
    assert f"timer · step timer · until {until}" in page
    # The timer step is open: its bar runs to the end of the axis.
    assert "df-bar df-bar-waiting df-bar-open" in admin_client.get(page_url(execution.id)).content.decode()


def test_long_values_are_collapsed_and_short_ones_shown(db, admin_client):
    execution = run("t.loop", {"n": 2})
    execution.metadata = {"rows": [{"n": n, "label": f"row {n}"} for n in range(40)]}
    execution.save(update_fields=["metadata"])

    body = admin_client.get(page_url(execution.id)).content.decode()

    assert re.search(r'<details class="df-json-long"><summary><code>\{&quot;rows&quot;.*</code> <span', body)
    assert '<pre class="df-json">0</pre>' in body  # step s0's short value, not collapsed


def test_the_list_filters_by_status_and_workflow_and_finds_by_id_key_or_workflow(db, admin_client):
    done = run("t.steps")
    failed = failed_run("list")
    keyed = durableflow.start("t.ping", idempotency_key="order-7")

    def listed(query: str) -> set[str]:
        body = admin_client.get(reverse(CHANGELIST) + query).content.decode()
        return set(re.findall(r'name="_selected_action" value="([^"]+)"', body))

    assert listed("?status__exact=failed") == {failed.id}
    assert listed("?workflow=t.steps") == {done.id}
    assert listed(f"?q={done.id}") == {done.id}
    assert listed("?q=order-7") == {keyed.id}
    assert listed("?q=t.admin-fail") == {failed.id}
    assert listed("?q=order") == set()  # exact matches only: each is an index lookup
    body = admin_client.get(reverse(CHANGELIST)).content.decode()
    assert '<span class="df-count">3</span> executions' in body
    assert "the payment service said no" in text(admin_client.get(reverse(CHANGELIST)))


def test_the_list_offers_registered_workflows_and_dates_without_scanning(db, admin_client):
    run("t.steps")
    body = admin_client.get(reverse(CHANGELIST)).content.decode()

    assert "?workflow=t.admin-hold" in body  # from the registry, although no run of it exists
    assert 'class="toplinks"' in body  # the date hierarchy


def test_the_list_offers_every_registered_version_of_the_chosen_workflow(db, admin_client):
    from durableflow.registry import WorkflowDefinition, registry

    def steps_v2(ctx, params):
        return 2

    old = run("t.steps")
    registry.register(WorkflowDefinition("t.steps", steps_v2, version="2"))
    try:
        body = admin_client.get(reverse(CHANGELIST) + "?workflow=t.steps").content.decode()
        assert re.search(r"version=1\b[^>]*>1<", body) and re.search(r"version=2\b[^>]*>2 \(new runs\)<", body)
        new = durableflow.start("t.steps")
        listed = admin_client.get(reverse(CHANGELIST) + "?workflow=t.steps&version=1").content.decode()
        assert set(re.findall(r'name="_selected_action" value="([^"]+)"', listed)) == {old.id}
        assert new.version == "2"
    finally:
        registry.unregister("t.steps", "2")
    assert not re.search(r"[?&]version=", admin_client.get(reverse(CHANGELIST)).content.decode())  # no workflow chosen


def test_pages_are_read_only_with_no_save_no_add_and_no_delete(db, admin_client):
    execution = run("t.steps")

    body = admin_client.get(page_url(execution.id)).content.decode()
    forged_save = admin_client.post(page_url(execution.id), {"status": "completed"})
    listing = admin_client.get(reverse(CHANGELIST)).content.decode()

    assert 'name="_save"' not in body and "deletelink" not in body
    assert forged_save.status_code == 403
    assert admin_client.get(reverse("admin:durableflow_execution_add")).status_code == 403
    assert admin_client.get(reverse("admin:durableflow_execution_delete", args=[execution.id])).status_code == 403
    assert 'value="delete_selected"' not in listing


# Actions -------------------------------------------------------------------------------------------


def test_cancel_from_the_page_goes_through_a_confirmation(db, admin_client):
    execution = run("t.timer", {"seconds": 3600})
    page = admin_client.get(page_url(execution.id)).content.decode()
    assert f'href="{action_url(execution.id, "cancel")}"' in page

    confirmation = admin_client.get(action_url(execution.id, "cancel"))
    assert Execution.objects.get(pk=execution.id).status == "waiting"  # GET changes nothing
    assert "Cancel this execution?" in text(confirmation)
    assert 'name="reason"' in confirmation.content.decode()

    done = admin_client.post(action_url(execution.id, "cancel"), {"reason": "customer called"}, follow=True)

    assert done.redirect_chain[-1][0] == page_url(execution.id)
    assert f"Execution {execution.id} cancelled." in text(done)
    cancelled = Execution.objects.get(pk=execution.id)
    assert cancelled.status == "cancelled" and cancelled.error["message"] == "customer called"
    history = text(admin_client.get(reverse("admin:durableflow_execution_history", args=[execution.id])))
    assert 'root Cancel (cancel) {"reason": "customer called"}' in history


def test_retry_from_the_page_resumes_a_failed_run(db, admin_client):
    execution = failed_run("retry")
    assert "retry" in re.findall(r'data-action="([\w-]+)"', admin_client.get(page_url(execution.id)).content.decode())

    Marker.hit("retry:fixed")
    response = admin_client.post(action_url(execution.id, "retry"), follow=True)
    assert f"Execution {execution.id} retried." in text(response), text(response)
    operations.deliver(execution.id)

    retried = Execution.objects.get(pk=execution.id)
    assert retried.status == "completed" and retried.result["charge"] == {"charged": True}


def test_buttons_are_offered_only_where_they_apply(db, admin_client):
    done, failed = run("t.steps"), failed_run("buttons")
    waiting = run("t.timer", {"seconds": 3600})

    def buttons(execution):
        return re.findall(r'data-action="([\w-]+)"', admin_client.get(page_url(execution.id)).content.decode())

    assert "cancel" not in buttons(done) and "retry" not in buttons(done)
    assert "retry" in buttons(failed) and "cancel" not in buttons(failed)
    assert "cancel" in buttons(waiting) and "retry" not in buttons(waiting)


def test_an_action_the_verb_refuses_shows_its_message_and_changes_nothing(db, admin_client):
    execution = run("t.steps")

    response = admin_client.post(action_url(execution.id, "cancel"), follow=True)

    assert f"Cancel refused: execution {execution.id} is completed; it cannot be cancelled" in text(response)
    assert Execution.objects.get(pk=execution.id).status == "completed"


def test_bulk_cancel_in_the_list_goes_through_a_confirmation(db, admin_client):
    first, second = (run("t.timer", {"seconds": 3600}) for _ in range(2))
    finished = run("t.steps")
    selected = [first.id, second.id, finished.id]

    confirmation = admin_client.post(reverse(CHANGELIST), {"action": "steer_cancel", "_selected_action": selected})
    assert confirmation.status_code == 200 and "Cancel these 3 executions?" in text(confirmation)
    assert Execution.objects.filter(status="cancelled").count() == 0

    done = admin_client.post(
        reverse(CHANGELIST),
        {"action": "steer_cancel", "_selected_action": selected, "post": "yes", "reason": "bulk"},
        follow=True,
    )

    page = text(done)
    assert "2 executions cancelled." in page
    assert f"Cancel refused: execution {finished.id} is completed" in page
    assert set(Execution.objects.filter(status="cancelled").values_list("id", flat=True)) == {first.id, second.id}


def test_an_invalid_payload_is_refused_at_its_json_pointer(db, admin_client, monkeypatch):
    sent = []
    monkeypatch.setattr(operations, "signal", lambda *args: sent.append(args), raising=False)
    execution = run("t.timer", {"seconds": 3600})

    syntax = admin_client.post(action_url(execution.id, "signal"), {"name": "go", "payload": "{'a': 1}"})
    nan = admin_client.post(action_url(execution.id, "signal"), {"name": "go", "payload": '{"a": [NaN]}'})
    nul = admin_client.post(action_url(execution.id, "signal"), {"name": "go", "payload": '{"a": ["x\\u0000"]}'})

    assert "Not valid JSON: Expecting property name enclosed in double quotes" in text(syntax)
    assert "Not valid JSON: NaN is not JSON (RFC 8259 has no NaN or Infinity)" in text(nan)
    assert "INVALID_PAYLOAD: payload: not a durable value at /a/0" in text(nul)
    assert sent == []


# Stores and effects ------------------------------------------------------------------------------


def test_effects_are_listed_and_shown_read_only(db, admin_client):
    harness = OrmHarness()
    execution_id = harness.start("t.effect-loop", {"n": 1, "prefix": "admin"})
    harness.deliver(execution_id)

    listing = admin_client.get(reverse("admin:durableflow_effect_changelist") + "?status__exact=settled")
    detail = admin_client.get(reverse("admin:durableflow_effect_change", args=["admin-0"]))

    assert listing.status_code == 200 and "admin-0" in listing.content.decode()
    body = detail.content.decode()
    assert detail.status_code == 200
    assert execution_id in body and "test.noop/v1" in body
    assert 'name="_save"' not in body  # read-only


def test_store_detail_shows_state_waiters_and_history(db, admin_client, monkeypatch):
    from durableflow.models import Store

    monkeypatch.setattr(dispatch, "publish", lambda message: True)
    harness = OrmHarness()
    waiting = harness.start("t.store-when", {"store": "admin-board"})
    harness.deliver(waiting)
    changer = harness.start("t.store-take", {"store": "admin-board"})
    durableflow.stores.update("t-board", "admin-board", lambda draft: draft.update(items=["job-1"]))
    harness.deliver(changer)
    store = Store.objects.get(name="t-board", store_id="admin-board")

    listing = admin_client.get(reverse("admin:durableflow_store_changelist"))
    detail = admin_client.get(reverse("admin:durableflow_store_change", args=[store.pk]))

    assert listing.status_code == 200 and "admin-board" in listing.content.decode()
    body = detail.content.decode()
    assert detail.status_code == 200
    assert "&quot;ready&quot;: false" in body  # the state, pretty-printed
    assert f"<td>{waiting}</td><td>ready</td>" in body  # the when waiter
    assert f"<td>2</td><td>{changer}</td><td>claim</td><td>store_take</td>" in body  # the take, at version 2


def test_a_waiting_execution_shows_its_waits_and_the_events_are_listed_read_only(db, admin_client):
    execution = run("t.wait-event", {"match": {"order": "admin-1"}})
    durableflow.send_event("t.other", {"order": "admin-1"}, event_id="admin-event")

    detail = admin_client.get(page_url(execution.id)).content.decode()
    events = admin_client.get(reverse("admin:durableflow_event_changelist") + "?kind__exact=event")
    event = admin_client.get(reverse("admin:durableflow_event_change", args=[events.context["cl"].result_list[0].pk]))

    assert "Waits" in detail and "<code>t.event</code>" in detail and "admin-1" in detail
    assert events.status_code == 200 and "admin-event" in events.content.decode()
    assert event.status_code == 200 and 'name="_save"' not in event.content.decode()
