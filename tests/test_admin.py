"""The admin pages render and their actions call the verbs (browser tests come with the admin work)."""

from __future__ import annotations

import re

import pytest
from django.urls import reverse

import durableflow
from durableflow import dispatch
from durableflow.models import Execution
from tests.harness import OrmHarness


@pytest.fixture
def staff_client(client, django_user_model):
    user = django_user_model.objects.create_superuser("root", "root@example.com", "pw")
    client.force_login(user)
    return client


def test_execution_list_and_detail_show_the_journal(db, staff_client):
    harness = OrmHarness()
    execution_id = harness.start("t.steps")
    harness.deliver(execution_id)

    listing = staff_client.get(reverse("admin:durableflow_execution_changelist") + "?status__exact=completed")
    detail = staff_client.get(reverse("admin:durableflow_execution_change", args=[execution_id]))

    assert listing.status_code == 200 and execution_id in listing.content.decode()
    body = detail.content.decode()
    assert detail.status_code == 200
    keys = re.findall(r'<td class="field-key">\s*<p>([^<]*)</p>', body)
    assert keys == ["a", "b", "c"]


def test_cancel_action(db, staff_client, monkeypatch):
    monkeypatch.setattr(dispatch, "send", lambda *args: True)
    execution = durableflow.start("t.steps")
    response = staff_client.post(
        reverse("admin:durableflow_execution_changelist"),
        {"action": "cancel_executions", "_selected_action": [execution.id]},
        follow=True,
    )
    assert response.status_code == 200
    assert "1 execution cancelled." in response.content.decode()
    assert Execution.objects.get(pk=execution.id).status == "cancelled"


def test_effects_are_listed_and_shown_read_only(db, staff_client):
    harness = OrmHarness()
    execution_id = harness.start("t.effect-loop", {"n": 1, "prefix": "admin"})
    harness.deliver(execution_id)

    listing = staff_client.get(reverse("admin:durableflow_effect_changelist") + "?status__exact=settled")
    detail = staff_client.get(reverse("admin:durableflow_effect_change", args=["admin-0"]))

    assert listing.status_code == 200 and "admin-0" in listing.content.decode()
    body = detail.content.decode()
    assert detail.status_code == 200
    assert execution_id in body and "test.noop/v1" in body
    assert 'name="_save"' not in body  # read-only


def test_store_detail_shows_state_waiters_and_history(db, staff_client, monkeypatch):
    from durableflow.models import Store

    monkeypatch.setattr(dispatch, "send", lambda *args: True)
    harness = OrmHarness()
    waiting = harness.start("t.store-when", {"store": "admin-board"})
    harness.deliver(waiting)
    changer = harness.start("t.store-take", {"store": "admin-board"})
    durableflow.stores.update("t-board", "admin-board", lambda draft: draft.update(items=["job-1"]))
    harness.deliver(changer)
    store = Store.objects.get(name="t-board", store_id="admin-board")

    listing = staff_client.get(reverse("admin:durableflow_store_changelist"))
    detail = staff_client.get(reverse("admin:durableflow_store_change", args=[store.pk]))

    assert listing.status_code == 200 and "admin-board" in listing.content.decode()
    body = detail.content.decode()
    assert detail.status_code == 200
    assert "&quot;ready&quot;: false" in body  # the state, pretty-printed
    assert f"<td>{waiting}</td><td>ready</td>" in body  # the when waiter
    assert f"<td>2</td><td>{changer}</td><td>claim</td><td>store_take</td>" in body  # the take, at version 2


def test_a_waiting_execution_shows_its_waits_and_the_events_list_renders(db, staff_client):
    harness = OrmHarness()
    execution_id = harness.start("t.wait-event", {"match": {"order": 1}})
    harness.deliver(execution_id)
    harness.send_event("t.other", {"order": 1}, event_id="admin-event")

    detail = staff_client.get(reverse("admin:durableflow_execution_change", args=[execution_id])).content.decode()
    events = staff_client.get(reverse("admin:durableflow_event_changelist") + "?kind__exact=event")

    assert "Waits" in detail and "t.event" in detail and "open" in detail
    assert events.status_code == 200 and "admin-event" in events.content.decode()
