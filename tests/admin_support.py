"""Shared by the admin's tests: URLs, runs in the test process, users with permissions (the
fixtures are in ``tests/admin/conftest.py``)."""

from __future__ import annotations

import re
from html import unescape

from django.contrib.auth.models import Permission
from django.urls import reverse

import durableflow
from durableflow import operations
from durableflow.models import Execution

CHANGELIST = "admin:durableflow_execution_changelist"
PASSWORD = "browser-pw"  # the browser tests' operator (``operator`` in tests/admin/conftest.py)


def page_url(execution_id: str) -> str:
    return reverse("admin:durableflow_execution_change", args=[execution_id])


def action_url(execution_id: str, name: str) -> str:
    return reverse("admin:durableflow_execution_action", args=[execution_id, name])


def text(response) -> str:
    return unescape(re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", response.content.decode())))


def staff(django_user_model, username: str, *codenames: str):
    user = django_user_model.objects.create_user(username, f"{username}@example.com", "pw", is_staff=True)
    user.user_permissions.set(Permission.objects.filter(content_type__app_label="durableflow", codename__in=codenames))
    return user


def run(workflow: str, params=None) -> Execution:
    execution = durableflow.start(workflow, params)
    operations.deliver(execution.id)
    return Execution.objects.get(pk=execution.id)


def failed_run(tag: str = "t") -> Execution:
    execution = run("t.admin-fail", {"tag": tag})
    assert execution.status == "failed"
    return execution
