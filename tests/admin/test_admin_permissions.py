"""Who may steer: the change permission for cancel and retry, the add permission for rerun and
fork, nothing without the view permission, and CSRF on every POST."""

from __future__ import annotations

import re

import pytest
from django.test import Client
from django.urls import reverse

from durableflow import operations
from durableflow.models import Execution
from tests.admin_support import CHANGELIST, action_url, failed_run, page_url, run, staff

pytestmark = pytest.mark.usefixtures("no_broker")


def test_a_viewer_without_change_permission_gets_no_action_and_403_on_a_forged_post(db, viewer):
    execution = run("t.timer", {"seconds": 3600})

    page = viewer.get(page_url(execution.id)).content.decode()
    listing = viewer.get(reverse(CHANGELIST)).content.decode()

    assert "data-action=" not in page
    assert "steer_cancel" not in listing and "steer_retry" not in listing
    assert viewer.get(action_url(execution.id, "cancel")).status_code == 403
    assert viewer.post(action_url(execution.id, "cancel")).status_code == 403
    forged = viewer.post(
        reverse(CHANGELIST), {"action": "steer_cancel", "_selected_action": [execution.id], "post": "yes"}
    )
    assert forged.status_code == 403
    assert Execution.objects.get(pk=execution.id).status == "waiting"


def test_change_permission_allows_cancel_and_retry_but_not_rerun(db, client, django_user_model, monkeypatch):
    monkeypatch.setattr(operations, "rerun", lambda execution_id: None, raising=False)
    client.force_login(staff(django_user_model, "operator", "view_execution", "change_execution"))
    failed = failed_run("operator")

    buttons = re.findall(r'data-action="([\w-]+)"', client.get(page_url(failed.id)).content.decode())

    assert "retry" in buttons and "rerun" not in buttons  # rerun starts a run: the add permission
    assert client.post(action_url(failed.id, "rerun")).status_code == 403
    assert client.post(action_url(failed.id, "retry")).status_code == 302
    assert Execution.objects.get(pk=failed.id).status == "pending"


def test_a_user_without_view_permission_sees_nothing(db, client, django_user_model):
    execution = run("t.steps")
    client.force_login(staff(django_user_model, "nobody"))

    assert client.get(page_url(execution.id)).status_code == 403
    assert client.get(action_url(execution.id, "cancel")).status_code == 403


def test_actions_enforce_csrf(db, superuser):
    execution = run("t.timer", {"seconds": 3600})
    browser = Client(enforce_csrf_checks=True)
    browser.force_login(superuser)

    page_action = browser.post(action_url(execution.id, "cancel"))
    bulk_action = browser.post(
        reverse(CHANGELIST), {"action": "steer_cancel", "_selected_action": [execution.id], "post": "yes"}
    )

    assert page_action.status_code == 403 and bulk_action.status_code == 403
    assert Execution.objects.get(pk=execution.id).status == "waiting"
    # With the token from the confirmation page, it goes through.
    confirmation = browser.get(action_url(execution.id, "cancel")).content.decode()
    token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', confirmation).group(1)
    assert browser.post(action_url(execution.id, "cancel"), {"csrfmiddlewaretoken": token}).status_code == 302
    assert Execution.objects.get(pk=execution.id).status == "cancelled"
