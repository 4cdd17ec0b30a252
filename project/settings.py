"""Demo project settings.

The database and the broker come from ``DATABASE_URL`` and ``CELERY_BROKER_URL``. Without
them the project runs on the embedded default: SQLite in ``var/`` and kombu's
``filesystem://`` transport in ``var/broker/`` (no services needed).
"""

import os
from pathlib import Path

import dj_database_url
from django.core.exceptions import ImproperlyConfigured

from durableflow import dispatch, transport

BASE_DIR = Path(__file__).resolve().parent.parent
VAR_DIR = Path(os.environ.get("DURABLEFLOW_VAR_DIR", BASE_DIR / "var"))

# No fallback: a well-known key lets anyone sign sessions. ``./run demo`` makes one (kept in
# var/demo/secret-key); anywhere else, set DJANGO_SECRET_KEY.
SECRET_KEY = os.environ.get("DJANGO_SECRET_KEY", "")
if not SECRET_KEY:
    raise ImproperlyConfigured(
        "Set DJANGO_SECRET_KEY (a long random string, e.g. "
        "python -c 'import secrets; print(secrets.token_urlsafe(50))'); ./run demo sets one itself."
    )
# Off unless asked for (DJANGO_DEBUG=1): a debug error page shows the settings, DATABASE_URL included.
DEBUG = os.environ.get("DJANGO_DEBUG") == "1"
ALLOWED_HOSTS = os.environ.get("DJANGO_ALLOWED_HOSTS", "localhost,127.0.0.1").split(",")

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "rest_framework",
    # Only for the demo's Swagger UI at /api/docs/ (the API itself needs neither).
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "django_celery_beat",
    "durableflow",
    "project.demo",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]

ROOT_URLCONF = "project.urls"
WSGI_APPLICATION = "project.wsgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]

# Database ----------------------------------------------------------------------------------

DATABASES = {
    "default": dj_database_url.parse(
        os.environ.get("DATABASE_URL", f"sqlite:///{VAR_DIR / 'db.sqlite3'}"),
        conn_max_age=600,
        conn_health_checks=True,
    )
}
if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    # Several processes (web, worker, beat) write to one file: WAL, and transactions that
    # take the write lock when they begin instead of failing when they upgrade.
    DATABASES["default"]["OPTIONS"] = {
        "transaction_mode": "IMMEDIATE",
        "timeout": 20,
        "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
    }

DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
STATIC_ROOT = VAR_DIR / "static"

# Celery --------------------------------------------------------------------------------------

CELERY_BROKER_URL = os.environ.get("CELERY_BROKER_URL", "filesystem://")
if CELERY_BROKER_URL.startswith("filesystem://"):
    # kombu's filesystem transport with atomic writes and claims (see durableflow.transport).
    CELERY_BROKER_TRANSPORT = "durableflow.transport:FilesystemTransport"
    CELERY_BROKER_TRANSPORT_OPTIONS = transport.options(os.environ.get("CELERY_FILESYSTEM_DIR", VAR_DIR / "broker"))
elif CELERY_BROKER_URL.startswith(("redis://", "rediss://")):
    # Bounded connects: a request that starts a workflow must not hang on a dead broker.
    CELERY_BROKER_TRANSPORT_OPTIONS = {"socket_connect_timeout": 2, "socket_timeout": 5}
CELERY_BROKER_CONNECTION_TIMEOUT = 2
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True

# Messages are wake-up calls; the database holds the truth. JSON only (pickle runs code).
CELERY_ACCEPT_CONTENT = ["json"]
CELERY_TASK_SERIALIZER = "json"
CELERY_RESULT_SERIALIZER = "json"
CELERY_TASK_IGNORE_RESULT = True
CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = True
# A pool process killed mid-task: its task counts as lost after 1 s, not Celery's 10 s wait for a
# result it might have sent first (none is kept here). Until then its slot takes no other task:
# on the synchronous pool of the filesystem transport, a second kill would stall the worker.
CELERY_WORKER_LOST_WAIT = 1.0
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_TASK_DEFAULT_QUEUE = "durableflow"
# Celery's Django fix-up closes the database connection before and after every task unless
# this is set; a delivery would then open a new connection each time. durableflow closes
# unusable or too-old connections itself at the start of each delivery (CONN_MAX_AGE).
CELERY_DB_REUSE_MAX = 1_000_000
CELERY_WORKER_HIJACK_ROOT_LOGGER = False

CELERY_BEAT_SCHEDULER = "django_celery_beat.schedulers:DatabaseScheduler"
CELERY_BEAT_MAX_LOOP_INTERVAL = 1
CELERY_BEAT_SCHEDULE = {
    "durableflow-sweep": {
        "task": dispatch.SWEEP,
        "schedule": 1.0,
        # A sweep nobody ran within 10 s is dropped: the next one does the same work.
        "options": {"queue": "durableflow", "expires": 10},
    },
    # Executions that finished more than 30 days ago go, with their journals.
    "durableflow-prune": {
        "task": dispatch.PRUNE,
        "schedule": 3600.0,
        "args": ["30d"],
        "options": {"queue": "durableflow", "expires": 600},
    },
}

# durableflow -----------------------------------------------------------------------------------

DURABLEFLOW = {
    "LEASE_SECONDS": 60,
    "SWEEP_INTERVAL": 1.0,
    "DEFAULT_QUEUE": "durableflow",
}

# The REST API takes these throttles (see durableflow/api/throttles.py): per client address,
# counted before authentication, so that wrong Basic passwords (0.4 s of hashing each) are cut
# too; then per user. Counted in the default cache (per process here; share it in production).
REST_FRAMEWORK = {
    "DEFAULT_THROTTLE_CLASSES": [
        "durableflow.api.throttles.AddressRateThrottle",
        "rest_framework.throttling.UserRateThrottle",
    ],
    "DEFAULT_THROTTLE_RATES": {"address": "300/minute", "user": "1200/minute"},
}

# The Swagger UI's assets come from drf-spectacular-sidecar: no CDN is needed.
SPECTACULAR_SETTINGS = {
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
    "SERVE_PERMISSIONS": ["rest_framework.permissions.IsAdminUser"],
}

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s [%(process)d] %(message)s"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain"}},
    "loggers": {
        "durableflow": {
            "handlers": ["console"],
            "level": os.environ.get("DURABLEFLOW_LOG_LEVEL", "INFO"),
            "propagate": False,
        }
    },
}
