"""Settings of benchmark processes: the demo project, the bench app, production-like logging."""

import os

os.environ.setdefault("DJANGO_SECRET_KEY", "durableflow-bench-only")  # the demo's settings want one

from project.settings import *  # noqa: F403
from project.settings import INSTALLED_APPS, LOGGING

INSTALLED_APPS = [*INSTALLED_APPS, "bench"]
DEBUG = False
REST_FRAMEWORK: dict = {}  # the benchmark's requests come from one address, many times a second

# The Celery-chain peer needs results; durableflow's own tasks ignore them.
CELERY_RESULT_BACKEND = os.environ.get("CELERY_RESULT_BACKEND")
CELERY_RESULT_EXPIRES = 600

DURABLEFLOW = {"LEASE_SECONDS": 60, "SWEEP_INTERVAL": 1.0, "DEFAULT_QUEUE": "durableflow"}

LOGGING = {**LOGGING, "loggers": {"durableflow": {"handlers": ["console"], "level": "WARNING", "propagate": False}}}
