"""The chaos tier: deselected unless asked for with ``-m chaos``; one cluster for the session.

``./run chaos [smoke|full] [--backend redis|rabbitmq|embedded]`` runs ``pytest -m chaos
tests/chaos`` with ``DATABASE_URL`` and ``CELERY_BROKER_URL`` naming the stack: on PostgreSQL +
Redis (the default) or PostgreSQL + RabbitMQ it picks free local ports, and the session starts
its own servers there (and refuses a port something already listens on), so that the scenarios
that kill, restart or disconnect them never touch a server anyone else uses; on the embedded
default, a SQLite file and the ``filesystem://`` broker in a temporary folder.
"""

from __future__ import annotations

import os
from urllib.parse import urlparse

import pytest

from tests.chaos import backends
from tests.chaos.backends import Backend
from tests.chaos.driver import TIERS, Chaos
from tests.chaos.report import Report
from tests.chaos.services import port_in_use
from tests.cluster import wait_for


def pytest_collection_modifyitems(config, items):
    """``./run tests`` (no ``-m``, or ``-m integration``) never runs the chaos tier."""
    if "chaos" in (config.option.markexpr or ""):
        return
    chaos = [item for item in items if item.get_closest_marker("chaos")]
    if chaos:
        config.hook.pytest_deselected(items=chaos)
        items[:] = [item for item in items if not item.get_closest_marker("chaos")]


def tier() -> str:
    name = os.environ.get("CHAOS_TIER", "smoke")
    if name not in TIERS:
        raise pytest.UsageError(f"CHAOS_TIER={name!r}: one of {sorted(TIERS)}")
    return name


def _private_targets(backend: Backend):
    """The database settings and the broker's port (``None``: no server), if the suite may take them."""
    from django.conf import settings
    from django.db import connection

    db = connection.settings_dict
    hint = "run ./run chaos (it picks free local ports for the suite's own servers)"
    # ./run chaos (and so CI) sets CHAOS_STRICT: there a tier that cannot run fails, never skips.
    skip = pytest.fail if os.environ.get("CHAOS_STRICT") else pytest.skip
    if backend.name == "embedded":
        return db, None
    broker = urlparse(settings.CELERY_BROKER_URL)
    for what, host, port in (("DATABASE_URL", db["HOST"], db["PORT"]), ("CELERY_BROKER_URL", broker.hostname,
                                                                        broker.port)):  # fmt: skip
        if host not in ("127.0.0.1", "localhost") or not port:
            skip(f"{what} must name 127.0.0.1 and a port: {hint}")
        if port_in_use(int(port)):
            skip(f"{what}'s port {port} is taken: the suite starts its own server there; {hint}")
    return db, broker.port


def stack() -> Backend:
    """The stack the settings name; the tier fails (``./run chaos``) or skips on any other."""
    try:
        return backends.current()
    except ValueError as error:
        skip = pytest.fail if os.environ.get("CHAOS_STRICT") else pytest.skip
        skip(f"{error}: run ./run chaos [--backend redis|rabbitmq|embedded]")


@pytest.fixture(scope="session")
def chaos(django_test_environment, django_db_blocker, tmp_path_factory):
    """The private services, migrated, and two workers of two pool processes with one beat."""
    from django.core.management import call_command

    import durableflow

    backend = stack()
    db, broker_port = _private_targets(backend)
    driver = Chaos(tmp_path_factory.mktemp("chaos-logs"), backend, db, broker_port)
    try:
        driver.start_services()
        with django_db_blocker.unblock():
            call_command("migrate", verbosity=0)
            driver.sql.prepare()
            driver.ensure()
            durableflow.start("t.ping", execution_id="chaos-warm-up")
            wait_for(lambda: driver.statuses(["chaos-warm-up"]).get("chaos-warm-up") == "completed", timeout=60,
                     what="the first execution to complete on the chaos cluster")  # fmt: skip
            yield driver
    finally:
        driver.stop()


@pytest.fixture(scope="session")
def report():
    return Report(tier(), stack())
