"""A failing test leaves no worker behind: a crash test that fails on purpose, run by pytest in
a subprocess with the suite's own fixtures, and the process table read afterwards."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import uuid
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import psutil
import pytest

from tests.cluster import ROOT

pytestmark = [pytest.mark.timeout(600)]

MARKER_VARIABLE = "DURABLEFLOW_CLEANUP_MARKER"

FAILING_TEST = '''
"""Written and run by tests/live/test_cleanup.py: a test fails while its worker is in the middle
of a step; the next one checks, while the session's cluster still runs, that it is gone."""

import os

import psutil

import durableflow
from tests.helpers import wait_for
from tests.testapp.models import Marker

MARKER = os.environ["{variable}"]


def test_fails_while_its_worker_runs_a_step(workers, live_db):
    workers(MARKER)  # the queue name: it is on the worker's command line
    durableflow.start("t.crash", {{"tag": MARKER, "hold": 600}}, queue=MARKER)
    wait_for(lambda: Marker.count(f"{{MARKER}}:slow") == 1, timeout=60, what="the slow step to start")
    raise AssertionError("fails on purpose while the worker holds a step")


def test_its_worker_was_stopped_when_it_failed(cluster):
    running = [p.pid for p in psutil.process_iter(["cmdline"]) if MARKER in " ".join(p.info["cmdline"] or ())]
    assert running == []
    assert cluster.main.alive()  # the session's worker runs on for the tests after it
'''


def marked(marker: str) -> list[psutil.Process]:
    """Processes started under this marker: on their command line (the probe's worker and its
    pool processes) or in their environment (also the session cluster's worker and beat)."""
    found = []
    for process in psutil.process_iter(["cmdline"]):
        try:
            if marker in " ".join(process.info["cmdline"] or ()) or process.environ().get(MARKER_VARIABLE) == marker:
                found.append(process)
        except psutil.Error:  # gone meanwhile, or another user's
            continue
    return found


def _child_env(marker: str, home: Path) -> tuple[dict[str, str], str | None]:
    """The parent's backend with a database, a broker folder and a var dir of the child's own.

    The child must not share the parent's broker: its session cluster flushes the Redis
    database it uses and runs a worker on the default queue, which would take (and lose)
    the parent's messages. So its broker is a filesystem folder of its own on both backends.
    """
    from django.conf import settings

    env = {
        key: value
        for key, value in os.environ.items()
        if key not in ("DATABASE_URL", "DURABLEFLOW_TEST_DB_NAME", "PYTEST_ADDOPTS")
    }
    env.update(
        {
            "DJANGO_SETTINGS_MODULE": settings.SETTINGS_MODULE,
            # SQLite: the test database is test-db.sqlite3 in this folder (tests/settings.py).
            "DURABLEFLOW_VAR_DIR": str(home / "var"),
            "CELERY_BROKER_URL": "filesystem://",
            "CELERY_FILESYSTEM_DIR": str(home / "broker"),
            MARKER_VARIABLE: marker,
        }
    )
    (home / "var").mkdir()
    test_database = None
    if os.environ.get("DATABASE_URL"):
        url = urlsplit(os.environ["DATABASE_URL"])
        name = f"{url.path.lstrip('/')}_{marker.replace('-', '_')}"
        env["DATABASE_URL"] = urlunsplit(url._replace(path=f"/{name}"))
        test_database = f"test_{name}"  # pytest-django's name for it
    return env, test_database


def _database_exists(test_database: str | None, home: Path) -> bool:
    if test_database is None:
        return (home / "var" / "test-db.sqlite3").exists()
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SELECT 1 FROM pg_database WHERE datname = %s", [test_database])
        return cursor.fetchone() is not None


def test_a_failing_crash_test_leaves_no_worker_running(live_db, tmp_path):
    marker = f"cleanup-{uuid.uuid4().hex[:12]}"
    env, test_database = _child_env(marker, tmp_path)
    # Inside the tests tree, so that tests/conftest.py applies; not named test_*.py, so that
    # no other run collects it should it be left behind.
    probe = ROOT / "tests" / f"_probe_{marker.replace('-', '_')}.py"
    probe.write_text(textwrap.dedent(FAILING_TEST.format(variable=MARKER_VARIABLE)))
    try:
        finished = subprocess.run(
            [
                sys.executable,
                "-m",
                "pytest",
                str(probe),
                "-q",
                "-p",
                "no:cacheprovider",  # its failure must not become the suite's --last-failed
                f"--basetemp={tmp_path / 'basetemp'}",
            ],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=480,
        )
        output = finished.stdout[-4000:] + finished.stderr[-4000:]
        left = marked(marker)

        assert finished.returncode == 1, output
        assert "fails on purpose while the worker holds a step" in finished.stdout, output
        assert "1 failed, 1 passed" in finished.stdout, output
        assert [process.pid for process in left] == []
        assert not _database_exists(test_database, tmp_path)
    finally:
        probe.unlink(missing_ok=True)
        for process in marked(marker):  # started by this test's child: never leak them
            process.kill()
