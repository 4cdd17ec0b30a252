"""Settings and system checks (SPEC §11, §12)."""

from __future__ import annotations

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.test import override_settings

from durableflow import checks
from durableflow.conf import df_settings
from durableflow.options import Retry


def test_settings_are_read_at_call_time():
    assert df_settings.LEASE_SECONDS == 4
    with override_settings(DURABLEFLOW={"LEASE_SECONDS": 30, "DEFAULT_RETRY": {"max_attempts": 2}}):
        assert df_settings.LEASE_SECONDS == 30
        assert df_settings.DEFAULT_RETRY == Retry(max_attempts=2)
    assert df_settings.LEASE_SECONDS == 4


def test_unknown_and_invalid_settings_are_errors():
    with override_settings(DURABLEFLOW={"LEASE_SECOND": 30}):
        with pytest.raises(ImproperlyConfigured, match="LEASE_SECOND"):
            _ = df_settings.LEASE_SECONDS
        assert [error.id for error in checks.check_settings()] == ["durableflow.E001"]
    with override_settings(DURABLEFLOW={"LEASE_SECONDS": 0}):
        with pytest.raises(ImproperlyConfigured, match="positive"):
            _ = df_settings.LEASE_SECONDS
    with override_settings(DURABLEFLOW={"PREPARED_STATEMENTS": "yes"}):
        with pytest.raises(ImproperlyConfigured, match="True or False"):
            _ = df_settings.PREPARED_STATEMENTS


def test_a_missing_sweep_is_reported():
    assert checks.check_beat_schedule() == []
    with override_settings(CELERY_BEAT_SCHEDULE={"other": {"task": "x", "schedule": 5}}):
        assert [warning.id for warning in checks.check_beat_schedule()] == ["durableflow.W001"]


def test_unsafe_celery_settings_are_reported():
    assert checks.check_celery_safety() == []
    with override_settings(CELERY_ACCEPT_CONTENT=["json", "pickle"], CELERY_TASK_ACKS_LATE=False):
        assert [w.id for w in checks.check_celery_safety()] == ["durableflow.W002", "durableflow.W003"]


@pytest.mark.parametrize("accept", [["application/x-python-serialize"], ["json", "Application/X-Python-Serialize"]])
def test_pickle_named_by_its_mime_type_is_reported_too(accept):
    with override_settings(CELERY_ACCEPT_CONTENT=accept):
        assert [w.id for w in checks.check_celery_safety()] == ["durableflow.W002"]
    with override_settings(CELERY_ACCEPT_CONTENT=["json", "application/json", "msgpack"]):
        assert checks.check_celery_safety() == []


def test_every_connection_clean_up_switched_off_is_reported(monkeypatch):
    from django.db import connections

    from durableflow.orm import db_alias

    assert checks.check_connection_cleanup() == []  # the recommended settings
    config = connections.settings[db_alias()]
    monkeypatch.setitem(config, "CONN_HEALTH_CHECKS", False)
    monkeypatch.setitem(config, "CONN_MAX_AGE", None)

    [warning] = checks.check_connection_cleanup()

    assert warning.id == "durableflow.W004"
    assert "found only by the query that fails on it" in warning.msg
    assert "CONN_HEALTH_CHECKS = True" in warning.hint
    with override_settings(CELERY_DB_REUSE_MAX=0):  # Celery closes connections around every task
        assert checks.check_connection_cleanup() == []
    monkeypatch.setitem(config, "CONN_MAX_AGE", 0)  # closed after every task
    assert checks.check_connection_cleanup() == []
