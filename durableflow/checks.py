"""System checks for a misconfigured durableflow."""

from __future__ import annotations

from django.conf import settings
from django.core.checks import Error, Warning, register
from django.core.exceptions import ImproperlyConfigured

from durableflow import dispatch


def _celery_conf():
    try:
        from celery import current_app
    except ImportError:  # pragma: no cover - celery is a requirement
        return None
    return current_app.conf


def _setting(name: str, default=None):
    """A Celery setting from Django settings (CELERY_ namespace) or the current Celery app."""
    value = getattr(settings, f"CELERY_{name.upper()}", None)
    if value is None:
        conf = _celery_conf()
        value = conf.get(name) if conf is not None else None
    return default if value is None else value


def _is_pickle(content: object) -> bool:
    """Whether an accepted content is pickle, named so or by its MIME type (kombu takes both)."""
    from kombu.serialization import registry

    text = str(content).strip().lower()
    return registry.type_to_name.get(text, text) == "pickle"


@register()
def check_settings(app_configs=None, **kwargs):
    from durableflow.conf import DEFAULTS, df_settings

    errors = []
    try:
        for name in DEFAULTS:
            getattr(df_settings, name)
    except ImproperlyConfigured as exc:
        errors.append(Error(str(exc), hint="Fix the DURABLEFLOW setting.", id="durableflow.E001"))
    return errors


@register()
def check_beat_schedule(app_configs=None, **kwargs):
    schedule = _setting("beat_schedule", {}) or {}
    if not any(entry.get("task") == dispatch.SWEEP for entry in schedule.values()):
        return [
            Warning(
                "No beat schedule entry runs the durableflow sweep: timers and retries will not "
                "fire and lost wake-up messages will not be re-sent.",
                hint=f'Add {{"durableflow-sweep": {{"task": "{dispatch.SWEEP}", "schedule": 1.0}}}} to '
                "CELERY_BEAT_SCHEDULE and run beat with django_celery_beat's DatabaseScheduler.",
                id="durableflow.W001",
            )
        ]
    return []


@register()
def check_celery_safety(app_configs=None, **kwargs):
    warnings = []
    accept = _setting("accept_content", ["json"])
    if any(_is_pickle(content) for content in accept):
        warnings.append(
            Warning(
                "Celery accepts pickle messages: anyone who can publish to the broker can run code.",
                hint='Set CELERY_ACCEPT_CONTENT = ["json"].',
                id="durableflow.W002",
            )
        )
    if not _setting("task_acks_late", False):
        warnings.append(
            Warning(
                "Celery acknowledges tasks before running them: a crashed worker loses its delivery "
                "until the sweep notices the expired lease.",
                hint="Set CELERY_TASK_ACKS_LATE = True and CELERY_TASK_REJECT_ON_WORKER_LOST = True.",
                id="durableflow.W003",
            )
        )
    return warnings


@register()
def check_connection_cleanup(app_configs=None, **kwargs):
    """Every clean-up of a dropped connection switched off on durableflow's database.

    Between tasks, a worker's connection is cleaned up by Celery's Django fix-up (closed around
    every task unless ``CELERY_DB_REUSE_MAX`` is set), by its age (``CONN_MAX_AGE``: 0 closes it
    after each task) or by Django's health check (``CONN_HEALTH_CHECKS``, before the first
    query after durableflow's tasks healed the connections). With all three off, a connection
    the database dropped while it was idle is found only by the query that fails on it:
    durableflow's tasks reconnect and go on, but the project's other code on the workers fails.
    """
    from django.db import connections

    from durableflow.orm import db_alias

    if not _setting("db_reuse_max"):
        return []
    alias = db_alias()
    config = connections.settings[alias] if alias in connections.settings else {}
    if config.get("CONN_HEALTH_CHECKS") or config.get("CONN_MAX_AGE", 0) == 0:
        return []
    return [
        Warning(
            f"Database connections on {alias!r} are kept between tasks and never checked: CELERY_DB_REUSE_MAX "
            "turns Celery's clean-up off, CONN_MAX_AGE keeps them open and CONN_HEALTH_CHECKS is off. A "
            "connection the database dropped while idle (a failover, a pooler restart, idle_session_timeout) "
            "is then found only by the query that fails on it: durableflow's own tasks reconnect and go on, "
            "the project's other code on the workers sees the error.",
            hint=f"Set CONN_HEALTH_CHECKS = True in DATABASES[{alias!r}] (or leave CELERY_DB_REUSE_MAX unset).",
            id="durableflow.W004",
        )
    ]
