"""Fixtures: the live database, real worker processes, and unique names.

Integration tests share one database with worker processes, so they commit for real
(``live_db``) and tell their rows apart by unique ids instead of truncating tables.
"""

from __future__ import annotations

import os

import pytest

from tests.cluster import ROOT, Cluster, Process, wait_for
from tests.docs_blocks import built_site  # noqa: F401 - session fixtures: built once
from tests.newproject import dist, source  # noqa: F401


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
    """The engine over each storage, for the contract tests that hold both to one behaviour."""
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
