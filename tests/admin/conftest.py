"""The admin's tests: its pages, actions and permissions, driven in the test process through
Django's test client (``no_broker``: deliveries run here, wake-ups go nowhere), and in a real
browser (headless Chromium) against runs on real workers (``*_browser.py``, marked integration).

The helpers they share (URLs, runs, users with permissions) are in ``tests/admin_support.py``;
the browser's server and screenshots in ``tests/browser.py``.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from django.urls import reverse

from durableflow import dispatch
from tests.admin_support import PASSWORD, staff
from tests.browser import VIEWPORT, AdminServer, Artifacts
from tests.helpers import uid


@pytest.fixture
def no_broker(monkeypatch):
    """Deliveries run in the test process; wake-ups go nowhere (``usefixtures`` in the modules)."""
    monkeypatch.setattr(dispatch, "publish", lambda message: True)


@pytest.fixture
def superuser(django_user_model):
    return django_user_model.objects.create_superuser("root", "root@example.com", "pw")


@pytest.fixture
def admin_client(client, superuser):
    """A client logged in as a superuser (``root``)."""
    client.force_login(superuser)
    return client


@pytest.fixture
def viewer(client, django_user_model):
    """Staff with the view permission only."""
    client.force_login(staff(django_user_model, "viewer", "view_execution"))
    return client


# The browser tests (``browser``: tests/conftest.py) -------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def admin_server(django_db_setup):
    server = AdminServer()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def artifacts(tmp_path_factory):
    folder = os.environ.get("DURABLEFLOW_TEST_ARTIFACTS")
    return Artifacts(Path(folder) if folder else tmp_path_factory.mktemp("screenshots"))


@pytest.fixture
def operator(live_db):
    # Not pytest-django's django_user_model: it requests ``db``, whose transaction would
    # hide the user from the server's threads.
    from django.contrib.auth import get_user_model

    user = get_user_model().objects.create_superuser(uid("operator"), "operator@example.com", PASSWORD)
    yield user
    user.delete()


@pytest.fixture
def page(browser, admin_server, operator):
    """A logged-in browser page (through the login form)."""
    context = browser.new_context(viewport=VIEWPORT)
    tab = context.new_page()
    tab.set_default_timeout(30_000)
    tab.goto(f"{admin_server.url}{reverse('admin:login')}")
    tab.fill("#id_username", operator.username)
    tab.fill("#id_password", PASSWORD)
    tab.click("input[type=submit]")
    tab.wait_for_load_state()
    assert tab.locator("#user-tools").count() == 1, tab.locator("body").inner_text()
    try:
        yield tab
    finally:
        context.close()
