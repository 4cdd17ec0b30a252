"""Shared by the admin's tests: URLs, runs in the test process, users with permissions."""

from __future__ import annotations

import re
from html import unescape

import pytest
from django.contrib.auth.models import Permission
from django.urls import reverse

import durableflow
from durableflow import dispatch, operations
from durableflow.models import Execution

CHANGELIST = "admin:durableflow_execution_changelist"


def page_url(execution_id: str) -> str:
    return reverse("admin:durableflow_execution_change", args=[execution_id])


def action_url(execution_id: str, name: str) -> str:
    return reverse("admin:durableflow_execution_action", args=[execution_id, name])


def text(response) -> str:
    return unescape(re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", response.content.decode())))


@pytest.fixture(autouse=True)
def no_broker(monkeypatch):
    """Deliveries run in the test process; wake-ups go nowhere."""
    monkeypatch.setattr(dispatch, "send", lambda *args: True)


@pytest.fixture
def superuser(django_user_model):
    return django_user_model.objects.create_superuser("root", "root@example.com", "pw")


@pytest.fixture
def admin_client(client, superuser):
    client.force_login(superuser)
    return client


def staff(django_user_model, username: str, *codenames: str):
    user = django_user_model.objects.create_user(username, f"{username}@example.com", "pw", is_staff=True)
    user.user_permissions.set(Permission.objects.filter(content_type__app_label="durableflow", codename__in=codenames))
    return user


@pytest.fixture
def viewer(client, django_user_model):
    """Staff with the view permission only."""
    client.force_login(staff(django_user_model, "viewer", "view_execution"))
    return client


def run(workflow: str, params=None) -> Execution:
    execution = durableflow.start(workflow, params)
    operations.deliver(execution.id)
    return Execution.objects.get(pk=execution.id)


def failed_run(tag: str = "t") -> Execution:
    execution = run("t.admin-fail", {"tag": tag})
    assert execution.status == "failed"
    return execution
