"""Test settings: the demo project plus a test app, a short lease and live-database names.

Worker processes started by the tests use these settings too, with
``DURABLEFLOW_TEST_DB_NAME`` naming the test database pytest-django created.
"""

import os

os.environ.setdefault("DJANGO_SECRET_KEY", "durableflow-tests-only")  # the demo's settings want one

from project.settings import *  # noqa: F403
from project.settings import DATABASES, INSTALLED_APPS, LOGGING, VAR_DIR

INSTALLED_APPS = [*INSTALLED_APPS, "tests.testapp"]

if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    # A file, not memory: worker processes must see the same database.
    DATABASES["default"]["TEST"] = {"NAME": str(VAR_DIR / "test-db.sqlite3")}

if os.environ.get("DURABLEFLOW_TEST_DB_NAME"):
    DATABASES["default"]["NAME"] = os.environ["DURABLEFLOW_TEST_DB_NAME"]

# DURABLEFLOW_TEST_ROUTED=1: durableflow's tables live in a second alias, chosen by a router
# (tests/live/test_routing.py runs a workflow on real workers so).
if os.environ.get("DURABLEFLOW_TEST_ROUTED"):
    _second = {**DATABASES["default"], "TEST": {}}
    if _second["ENGINE"] == "django.db.backends.sqlite3":
        _second["NAME"] = str(VAR_DIR / "routed.sqlite3")
        _second["TEST"] = {"NAME": str(VAR_DIR / "test-routed.sqlite3")}
    else:
        _second["NAME"] = f"{DATABASES['default']['NAME']}_routed"
    if os.environ.get("DURABLEFLOW_TEST_ROUTED_DB_NAME"):
        _second["NAME"] = os.environ["DURABLEFLOW_TEST_ROUTED_DB_NAME"]
    DATABASES["durableflow"] = _second
    DATABASE_ROUTERS = ["tests.routers.DurableflowRouter"]

DURABLEFLOW = {
    # Short, so that crash tests recover in seconds; the heartbeat renews it every 1.3 s.
    "LEASE_SECONDS": 4,
    "SWEEP_INTERVAL": 1.0,
    "DEFAULT_QUEUE": "durableflow",
}
# A worker that must show what does not wait for the lease runs with the default one (60 s).
if os.environ.get("DURABLEFLOW_TEST_LEASE_SECONDS"):
    DURABLEFLOW["LEASE_SECONDS"] = float(os.environ["DURABLEFLOW_TEST_LEASE_SECONDS"])
if os.environ.get("DURABLEFLOW_TEST_MAX_LOST_DELIVERIES"):
    DURABLEFLOW["MAX_LOST_DELIVERIES"] = int(os.environ["DURABLEFLOW_TEST_MAX_LOST_DELIVERIES"])
# "unset": Celery's fix-up closes the connections around every task, as without the recommendation.
if os.environ.get("DURABLEFLOW_TEST_DB_REUSE_MAX") == "unset":
    del CELERY_DB_REUSE_MAX  # noqa: F821 - from project.settings

PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]

# The suite makes thousands of API requests from one address: no throttles (their own test
# turns the demo's on).
REST_FRAMEWORK: dict = {}

LOGGING = {**LOGGING, "loggers": {"durableflow": {"handlers": ["console"], "level": "INFO", "propagate": True}}}
if os.environ.get("DURABLEFLOW_TEST_QUEUE_TYPE"):  # RabbitMQ: "quorum", as the operating guide advises
    CELERY_TASK_DEFAULT_QUEUE_TYPE = CELERY_TASK_CREATE_MISSING_QUEUE_TYPE = os.environ["DURABLEFLOW_TEST_QUEUE_TYPE"]
