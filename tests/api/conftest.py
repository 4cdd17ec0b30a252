"""The REST API's tests, in the test process through Django's test client: every endpoint, its
bodies and errors (never a 5xx), permissions, throttles and the schema. Nothing here starts a
worker: ``no_send`` records the wake-ups instead (the API on real workers is in ``tests/live/``).

The JSON client and the users are in ``tests/apiclient.py``.
"""

from __future__ import annotations

import pytest

from tests.apiclient import Api, make_user


@pytest.fixture
def no_send(monkeypatch):
    """Wake-ups are recorded instead of sent (no worker in these tests)."""
    from durableflow import dispatch

    sent: list[tuple] = []
    monkeypatch.setattr(
        dispatch, "publish", lambda message: sent.append((message.task, *message.args, message.queue)) or True
    )
    return sent


@pytest.fixture
def api(db, client, django_user_model, no_send) -> Api:
    """A superuser's client (who holds every permission)."""
    return Api(client).login(make_user(django_user_model, "root", superuser=True))
