"""Calling the REST API from tests: a JSON client and users with exactly one permission (the
fixtures, ``api`` and ``no_send``, are in ``tests/api/conftest.py``)."""

from __future__ import annotations

import json
from typing import Any

from django.test import Client

PREFIX = "/api/durableflow/"


class Api:
    """A Django test client that sends JSON bodies and reads JSON answers."""

    def __init__(self, client: Client):
        self.client = client

    def get(self, path: str, **extra: Any):
        return self.client.get(PREFIX + path, **extra)

    def post(self, path: str, body: Any = None, *, raw: bytes | str | None = None, **extra: Any):
        extra.setdefault("content_type", "application/json")
        if raw is None:
            raw = b"" if body is None else json.dumps(body)
        return self.client.post(PREFIX + path, raw, **extra)

    def put(self, path: str, body: Any = None, **extra: Any):
        extra.setdefault("content_type", "application/json")
        return self.client.put(PREFIX + path, b"" if body is None else json.dumps(body), **extra)

    def login(self, user) -> Api:
        self.client.force_login(user)
        return self


def make_user(django_user_model, name: str, *permissions: str, staff: bool = False, superuser: bool = False):
    """A user with exactly these ``durableflow.*`` permissions (codenames); a superuser holds all."""
    from django.contrib.auth.models import Permission

    user = django_user_model.objects.create_user(
        name, f"{name}@example.com", "pw", is_staff=staff or superuser, is_superuser=superuser
    )
    granted = Permission.objects.filter(content_type__app_label="durableflow", codename__in=permissions)
    user.user_permissions.set(granted)
    return user


def error(response, status: int, code: str) -> dict[str, Any]:
    """Assert an error answer in the one shape; return its body."""
    assert response.status_code == status, (response.status_code, response.content[:500])
    assert response["Content-Type"].startswith("application/json"), response["Content-Type"]
    body = response.json()
    assert body["code"] == code, body
    assert isinstance(body["message"], str) and body["message"]
    assert set(body) <= {"code", "message", "detail"}
    return body
