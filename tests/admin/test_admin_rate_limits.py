"""The rate limits' admissions in the admin: listed and shown read-only with the view permission,
never added, changed or deleted there; a waiting step's execution says what it waits for."""

from __future__ import annotations

import pytest
from django.urls import reverse

from durableflow.models import RateLimitAdmission
from tests.admin_support import page_url, run, staff, text

pytestmark = pytest.mark.usefixtures("no_broker")
LIST = "admin:durableflow_ratelimitadmission_changelist"


@pytest.fixture
def admissions(db):
    first, second = run("t.rate-limited-admin", {"n": 1}), run("t.rate-limited-admin", {"n": 2})
    return first, second


def test_admissions_are_listed_and_shown_with_the_view_permission(client, django_user_model, admissions):
    client.force_login(staff(django_user_model, "watcher", "view_ratelimitadmission"))
    admitted = RateLimitAdmission.objects.get(execution_id=admissions[0].id)

    listing = client.get(reverse(LIST))
    page = client.get(reverse("admin:durableflow_ratelimitadmission_change", args=[admitted.pk]))

    assert listing.status_code == 200 and "admin-api" in text(listing)
    assert admissions[1].id in text(listing)  # the refused request, waiting in its place
    assert page.status_code == 200 and admissions[0].id in text(page)
    assert "Save" not in page.content.decode()


def test_admissions_cannot_be_added_changed_or_deleted(admin_client, admissions):
    admitted = RateLimitAdmission.objects.get(execution_id=admissions[0].id)
    change = reverse("admin:durableflow_ratelimitadmission_change", args=[admitted.pk])

    assert admin_client.get(reverse("admin:durableflow_ratelimitadmission_add")).status_code == 403
    assert admin_client.post(change, {"units": 5}).status_code == 403
    delete = reverse("admin:durableflow_ratelimitadmission_delete", args=[admitted.pk])
    assert admin_client.post(delete, {"post": "yes"}).status_code == 403
    assert RateLimitAdmission.objects.get(pk=admitted.pk).units == 1


def test_without_the_view_permission_nothing_is_shown(client, django_user_model, admissions):
    client.force_login(staff(django_user_model, "nobody", "view_execution"))

    assert client.get(reverse(LIST)).status_code == 403


def test_a_waiting_steps_execution_names_its_rate_limit(admin_client, admissions):
    page = text(admin_client.get(page_url(admissions[1].id)))

    assert "rate_limit · step call · key admin-api · until" in page
