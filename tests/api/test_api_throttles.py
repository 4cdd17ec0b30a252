"""The demo's API throttles: per client address before the credentials are checked (a wrong
Basic password costs its hash: a flood of them is cut before any hashing), then per user; a
throttled request is 429 ``THROTTLED`` with ``Retry-After``."""

from __future__ import annotations

import base64

import pytest
from django.core.cache import cache
from django.test import override_settings
from rest_framework import authentication

from project import settings as demo
from tests.apiclient import Api, error, make_user


def _demo_throttles(**rates: str) -> dict:
    return {**demo.REST_FRAMEWORK, "DEFAULT_THROTTLE_RATES": {**demo.REST_FRAMEWORK["DEFAULT_THROTTLE_RATES"], **rates}}


@pytest.fixture(autouse=True)
def counts():
    cache.clear()
    yield
    cache.clear()


def test_the_demo_throttles_by_address_before_authentication_and_then_by_user():
    assert demo.REST_FRAMEWORK["DEFAULT_THROTTLE_CLASSES"] == [
        "durableflow.api.throttles.AddressRateThrottle",
        "rest_framework.throttling.UserRateThrottle",
    ]


def test_wrong_passwords_past_the_address_rate_are_refused_before_any_hashing(db, client, monkeypatch):
    checked = []
    real = authentication.authenticate
    monkeypatch.setattr(authentication, "authenticate", lambda **kw: checked.append(kw) or real(**kw))
    guess = {"HTTP_AUTHORIZATION": "Basic " + base64.b64encode(b"admin:guess").decode()}

    with override_settings(REST_FRAMEWORK=_demo_throttles(address="3/minute")):
        answers = [Api(client).get("executions/", **guess) for _ in range(5)]

    assert [a.status_code for a in answers[:3]] == [403, 403, 403]  # session first: NOT_AUTHENTICATED
    for refused in answers[3:]:
        body = error(refused, 429, "THROTTLED")
        assert int(refused["Retry-After"]) > 0 and body["detail"]["wait"] > 0
    assert len(checked) == 3


def test_a_user_past_the_user_rate_is_throttled(db, client, django_user_model, no_send, monkeypatch):
    from rest_framework.throttling import UserRateThrottle

    # DRF's own throttles read their rates once, at import: set the class's copy.
    monkeypatch.setattr(UserRateThrottle, "THROTTLE_RATES", {"user": "2/minute"})
    api = Api(client).login(make_user(django_user_model, "busy", "view_execution"))
    with override_settings(REST_FRAMEWORK=_demo_throttles()):
        statuses = [api.get("executions/").status_code for _ in range(3)]
    assert statuses == [200, 200, 429]


def test_without_a_rate_the_address_throttle_says_what_to_set(db, client):
    from django.core.exceptions import ImproperlyConfigured

    settings = {"DEFAULT_THROTTLE_CLASSES": ["durableflow.api.throttles.AddressRateThrottle"]}
    with override_settings(REST_FRAMEWORK=settings), pytest.raises(ImproperlyConfigured, match='"address"'):
        Api(client).get("executions/")
