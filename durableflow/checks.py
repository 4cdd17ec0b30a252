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
