"""The built documentation site in headless Chromium: the tutorial, the API reference and the
REST reference open and draw with nothing fetched from outside (no CDN), screenshots saved as
test artifacts (``$DURABLEFLOW_TEST_ARTIFACTS``, else pytest's temporary folder)."""

from __future__ import annotations

import functools
import http.server
import os
import threading
from pathlib import Path

import pytest
from django.conf import settings

from tests.browser import VIEWPORT, Artifacts, missing_browser

MISSING = missing_browser()

pytestmark = [
    pytest.mark.skipif(MISSING is not None, reason=f"browser tests skipped: {MISSING}"),
    pytest.mark.skipif(
        not settings.DATABASES["default"]["ENGINE"].endswith("sqlite3"),
        reason="runs once, in the embedded pass (the site does not depend on the database)",
    ),
]


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


@pytest.fixture(scope="module")
def site_url(built_site):
    site, _ = built_site
    handler = functools.partial(_Quiet, directory=str(site))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture(scope="module")
def artifacts(tmp_path_factory):
    folder = os.environ.get("DURABLEFLOW_TEST_ARTIFACTS")
    return Artifacts(Path(folder) if folder else tmp_path_factory.mktemp("docs-screenshots"))


@pytest.fixture
def page(browser, site_url):
    context = browser.new_context(viewport=VIEWPORT)
    page = context.new_page()
    page.outside = []  # every request that left the site (a CDN, a web font...)
    page.on("request", lambda r: None if r.url.startswith((site_url, "data:", "blob:")) else page.outside.append(r.url))
    yield page
    context.close()


def test_the_tutorial_opens_with_its_steps_and_code(page, site_url, artifacts):
    page.goto(f"{site_url}/tutorial/", wait_until="networkidle")
    assert page.title().startswith("Tutorial")
    headings = page.locator("article h2").all_inner_texts()
    assert any("Write the workflow" in h for h in headings) and any("admin" in h for h in headings)
    workflow = page.locator("article .highlight", has_text='@durableflow.workflow("orders.approval"').first
    assert workflow.is_visible()
    assert page.locator("article img[src*='admin-changelist']").first.evaluate("img => img.naturalWidth") > 0
    print("screenshot:", artifacts.screenshot(page, "docs-tutorial"))
    assert page.outside == []


def test_the_api_reference_opens_rendered_from_the_docstrings(page, site_url, artifacts):
    page.goto(f"{site_url}/reference/python-api/", wait_until="networkidle")
    assert page.locator("h3#durableflow\\.operations\\.start").is_visible()
    assert page.locator(".doc-signature", has_text="idempotency_key").first.is_visible()
    print("screenshot:", artifacts.screenshot(page, "docs-python-api"))
    assert page.outside == []


def test_the_rest_reference_draws_swagger_ui_from_local_assets(page, site_url, artifacts):
    page.goto(f"{site_url}/reference/rest-api/", wait_until="networkidle")
    frame = page.frame_locator("iframe.swagger-ui-iframe")
    executions = frame.locator(".opblock-tag", has_text="executions").first
    executions.wait_for(timeout=20_000)
    executions.click()  # the tags start collapsed (docExpansion: none)
    frame.locator(".opblock-post").first.wait_for(timeout=20_000)
    assert frame.locator(".opblock").count() >= 8  # start, list, get, journal, cancel, retry, rerun, fork...
    print("screenshot:", artifacts.screenshot(page, "docs-rest-api"))
    assert page.outside == []
