"""Headless Chromium for the admin's browser tests: Debian's chromium driven by Playwright.

Never ``playwright install``: the browser is the system's ``/usr/bin/chromium`` (``.ci/run``
installs it when it is missing). Without it, the browser tests are skipped, and say why.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

CHROMIUM = Path(os.environ.get("DURABLEFLOW_TEST_CHROMIUM", "/usr/bin/chromium"))
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-dev-shm-usage",
]
VIEWPORT = {"width": 1600, "height": 900}


def missing_browser() -> str | None:
    """Why the browser tests cannot run here, or None."""
    if not (CHROMIUM.exists() and os.access(CHROMIUM, os.X_OK)):
        return f"{CHROMIUM} is missing: install Debian's chromium (apt-get install chromium) to run the browser tests"
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return "the playwright package is missing: pip install -r requirements.txt"
    return None


class AdminServer:
    """The project's WSGI app with static files (Django admin's CSS and JS, ours) on a free port.

    Django's live server thread, without pytest-django's ``live_server``: that one requests
    ``transactional_db``, whose flush after each test would empty tables the session's worker
    and beat rely on (and the rows of other tests running against them). Requests use the
    live test database while a test holds ``live_db``; each request thread closes its
    connections when it ends.
    """

    def __init__(self) -> None:
        from django.contrib.staticfiles.handlers import StaticFilesHandler
        from django.test.testcases import LiveServerThread

        self.thread = LiveServerThread("127.0.0.1", StaticFilesHandler, port=0)
        self.thread.daemon = True
        self.thread.start()
        self.thread.is_ready.wait(timeout=30)
        if self.thread.error:
            raise self.thread.error
        self.url = f"http://127.0.0.1:{self.thread.port}"

    def stop(self) -> None:
        self.thread.terminate()


class Artifacts:
    """Where screenshots go: ``$DURABLEFLOW_TEST_ARTIFACTS`` or pytest's temporary folder."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        folder.mkdir(parents=True, exist_ok=True)

    def screenshot(self, page, name: str) -> Path:
        path = self.folder / f"{name}.png"
        page.screenshot(path=str(path), full_page=True)
        return path

    def keep(self, path: Path, destination: Path) -> None:
        shutil.copyfile(path, destination)
