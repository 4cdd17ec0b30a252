"""Fixtures for every folder: the live database, real worker processes, the contract harness.

The tests are in folders by the part they hold to account, each with a ``conftest.py`` saying
what belongs there and holding its fixtures (a test module never imports a fixture):
``engine/`` (the verbs in the test process), ``orm/`` (the Django/PostgreSQL adapter),
``contract/`` (every verb on both storages: ``backend``), ``documents/``, ``api/``, ``admin/``,
``live/`` (real worker processes), ``docs/``, ``repository/`` (the layers, the package, the
benchmarks), ``chaos/`` (``./run chaos`` only). The helpers they share stay here at the top
(``helpers.py``, ``cluster.py``, ``harness.py``, ``testapp/``...).

Integration tests share one database with worker processes, so they commit for real
(``live_db``) and tell their rows apart by unique ids instead of truncating tables. Every test
that starts workers (``cluster``, ``workers``) is marked ``integration``
(``tests/repository/test_markers.py`` holds every folder to it).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.browser import CHROMIUM, CHROMIUM_ARGS
from tests.cluster import ROOT, Cluster, Process, wait_for
from tests.newproject import run


@pytest.fixture(scope="session")
def django_db_setup(django_test_environment, django_db_blocker):
    """Create the test database for every session: live tests use it without a django_db mark."""
    from django.test.utils import setup_databases, teardown_databases

    with django_db_blocker.unblock():
        from django.conf import settings

        config = setup_databases(verbosity=0, interactive=False, aliases=set(settings.DATABASES))
    yield
    from durableflow.orm.waiting import stop_listening

    stop_listening()
    with django_db_blocker.unblock():
        _disconnect_others()
        teardown_databases(config, verbosity=0)


def _disconnect_others() -> None:
    """Workers were killed; PostgreSQL may not have noticed yet, and DROP DATABASE would fail."""
    from django.db import connection

    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                "WHERE datname = current_database() AND pid <> pg_backend_pid()"
            )


@pytest.fixture(autouse=True)
def no_lease_left_held():
    """Every delivery this process starts releases its lease, whatever the test did to it."""
    from durableflow.orm.leases import keeper

    yield
    held = sorted(lease.execution_id for lease in keeper.held())
    assert not held, f"leases still held by this process after the test: {held}"


@pytest.fixture(params=["memory", "orm"])
def backend(request):
    """The engine over each storage, for the contract tests that hold both to one behaviour
    (the in-memory side is the shipped ``WorkflowTester``: ``tests/harness.py``)."""
    from tests.harness import MemoryHarness, OrmHarness

    if request.param == "orm":
        request.getfixturevalue("db")
    harness = MemoryHarness() if request.param == "memory" else OrmHarness()
    yield harness
    harness.close()


@pytest.fixture
def live_db(django_db_setup, django_db_blocker):
    """Autocommit access to the test database that worker processes also use."""
    with django_db_blocker.unblock():
        yield


def broker_url() -> str:
    from django.conf import settings

    return settings.CELERY_BROKER_URL


def _routed_db_name() -> dict[str, str]:
    """Workers must use the test database of the second alias too, when there is one."""
    from django.db import connections

    if "durableflow" not in connections:
        return {}
    return {"DURABLEFLOW_TEST_ROUTED_DB_NAME": str(connections["durableflow"].settings_dict["NAME"])}


def _purge_amqp(queue: str) -> None:
    """Drop what an earlier run left in ``queue`` on RabbitMQ (a queue outlives its consumers)."""
    from amqp.exceptions import NotFound
    from celery import current_app

    with current_app.connection_for_write() as connection:
        try:
            connection.default_channel.queue_purge(queue)
        except NotFound:  # never declared: nothing to drop
            pass


@pytest.fixture(scope="session")
def cluster(django_db_setup, django_db_blocker, tmp_path_factory):
    """One worker (two pool processes) on the default queue and one beat, for the session."""
    from django.db import connection

    import durableflow
    from durableflow.models import Execution

    if broker_url().startswith("redis://"):
        import redis

        redis.Redis.from_url(broker_url()).flushdb()
    elif broker_url().startswith("amqp://"):
        _purge_amqp("durableflow")
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "tests.settings",
        "DURABLEFLOW_TEST_DB_NAME": str(connection.settings_dict["NAME"]),
        **_routed_db_name(),
        "PYTHONPATH": str(ROOT),
    }
    cluster = Cluster(env, tmp_path_factory.mktemp("cluster-logs"))
    try:
        cluster.main = cluster.worker("durableflow", concurrency=2)
        cluster.beat_process = cluster.beat()
        with django_db_blocker.unblock():
            execution = durableflow.start("t.ping")
            wait_for(
                lambda: Execution.objects.get(pk=execution.id).status == "completed",
                timeout=60,
                what="the first execution to complete on the cluster",
            )
        yield cluster
    finally:
        cluster.stop_all()


class Workers:
    """Starts workers on the session cluster for one test, and stops them after it."""

    def __init__(self, cluster: Cluster):
        self.cluster = cluster
        self.started: list[Process] = []

    def __call__(self, queues: str, **options) -> Process:
        process = self.cluster.worker(queues, **options)
        self.started.append(process)
        return process

    def stop_all(self) -> None:
        while self.started:
            self.cluster.stop(self.started.pop())


@pytest.fixture
def workers(cluster):
    """``workers(queue, concurrency=1)`` starts a worker; teardown stops it, even on failure."""
    started = Workers(cluster)
    yield started
    started.stop_all()


@pytest.fixture(scope="module")
def browser():
    """Headless Chromium (Debian's), for the admin's and the documentation's browser tests."""
    from playwright.sync_api import sync_playwright

    # Playwright's sync API keeps an asyncio loop registered as running in this thread, so
    # Django refuses ORM calls here (SynchronousOnlyOperation) unless told that this blocking
    # use is intended; nothing in the test runs on that loop.
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
        with sync_playwright() as playwright:
            chromium = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
            try:
                yield chromium
            finally:
                chromium.close()


# A fresh clone and the wheel built from it (the packaging test, the tutorial's): built once --------


@pytest.fixture(scope="session")
def source(tmp_path_factory) -> Path:
    """The files a fresh clone has (what git tracks), nothing of this checkout's state."""
    clone = tmp_path_factory.mktemp("clone")
    tracked = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout
    for name in tracked.decode().split("\0"):
        if name and (ROOT / name).is_file():
            (clone / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, clone / name)
    return clone


@pytest.fixture(scope="session")
def dist(source, tmp_path_factory) -> dict[str, Path]:
    out = tmp_path_factory.mktemp("dist")
    run([sys.executable, "-m", "build", "--outdir", out, source], cwd=source)
    (wheel,) = out.glob("durableflow-*.whl")
    (sdist,) = out.glob("durableflow-*.tar.gz")
    return {"wheel": wheel, "sdist": sdist}
