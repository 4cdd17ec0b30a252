"""durableflow's settings: one ``DURABLEFLOW`` dict, every key optional, read at call time.

    DURABLEFLOW = {"LEASE_SECONDS": 60, "SWEEP_INTERVAL": 1.0, ...}

Values are cached and dropped on ``setting_changed``, so ``override_settings`` works.
"""

from __future__ import annotations

from typing import Any

from django.core.exceptions import ImproperlyConfigured
from django.core.signals import setting_changed
from django.dispatch import receiver

from durableflow.options import Retry

__all__ = ["DEFAULTS", "df_settings"]

DEFAULTS: dict[str, Any] = {
    # A delivery's lease; renewed by a heartbeat every third of it while a step runs. An
    # execution whose lease expired (a crashed worker) is delivered again by the sweep.
    "LEASE_SECONDS": 60,
    # How often beat runs the sweep (seconds); timers fire at most this late.
    "SWEEP_INTERVAL": 1.0,
    # The Celery queue of deliveries (and of the sweep) unless a start names another.
    "DEFAULT_QUEUE": "durableflow",
    # Retry policy of steps without retry=; one attempt unless set.
    "DEFAULT_RETRY": None,
    # DRF permission classes of the REST API (dotted paths or classes), for every endpoint. By
    # default Django's model permissions, as the admin checks them (is_staff grants nothing).
    "API_PERMISSION_CLASSES": ["durableflow.api.permissions.ModelPermission"],
    # Workflows the REST API may start: None (every registered one) or a list of names. A name
    # outside the list answers 404 UNKNOWN_WORKFLOW over the API; Python can still start it.
    "API_WORKFLOWS": None,
    # Largest params, step value or result, in bytes of canonical JSON.
    "MAX_PAYLOAD_BYTES": 1_000_000,
    # How many executions one sweep wakes or re-sends at most.
    "SWEEP_BATCH_SIZE": 500,
    # How many deliveries of one run in a row may die with their process (SIGKILL, out of memory,
    # a crash in native code) before the run is failed with DELIVERY_LOST instead of delivered
    # again: a step that always kills its worker would otherwise be retried forever.
    "MAX_LOST_DELIVERIES": 10,
    # The longest a caller of result() (or the API's ?wait=) goes without reading the database
    # again: on PostgreSQL the finishing transaction's notification wakes it at once, and this is
    # the safety net; on SQLite the poll backs off from 2 ms up to it.
    "RESULT_RECHECK_SECONDS": 1.0,
    # PostgreSQL: the server parses and plans a delivery's statements (claim, journal read, step
    # write, outcome) once per connection. False behind a pooler that does not carry prepared
    # statements from one transaction to the next (PgBouncer in transaction mode before 1.21).
    "PREPARED_STATEMENTS": True,
}


class Settings:
    def __init__(self) -> None:
        self._cache: dict[str, Any] = {}

    @property
    def user_settings(self) -> dict[str, Any]:
        from django.conf import settings

        value = getattr(settings, "DURABLEFLOW", {}) or {}
        unknown = set(value) - set(DEFAULTS)
        if unknown:
            raise ImproperlyConfigured(
                f"Unknown DURABLEFLOW setting(s): {', '.join(sorted(unknown))}. Known: {', '.join(sorted(DEFAULTS))}."
            )
        return value

    def __getattr__(self, name: str) -> Any:
        if name not in DEFAULTS:
            raise AttributeError(f"Invalid durableflow setting: {name!r}")
        if name not in self._cache:
            self._cache[name] = self._validate(name, self.user_settings.get(name, DEFAULTS[name]))
        return self._cache[name]

    def _validate(self, name: str, value: Any) -> Any:
        if name == "DEFAULT_RETRY":
            try:
                return Retry.from_setting(value)
            except (TypeError, ValueError) as exc:
                raise ImproperlyConfigured(f"DURABLEFLOW['DEFAULT_RETRY']: {exc}") from None
        if name == "API_PERMISSION_CLASSES":
            if isinstance(value, (str, bytes)) or not isinstance(value, (list, tuple)) or not value:
                raise ImproperlyConfigured(
                    "DURABLEFLOW['API_PERMISSION_CLASSES'] must be a non-empty list of permission classes "
                    f"(dotted paths); not {value!r}. An empty list would let anyone in."
                )
            return list(value)
        if name == "API_WORKFLOWS":
            if value is None:
                return None
            if isinstance(value, (str, bytes)) or not isinstance(value, (list, tuple, set, frozenset)):
                raise ImproperlyConfigured(
                    f"DURABLEFLOW['API_WORKFLOWS'] must be None or a list of names, not {value!r}"
                )
            if not all(isinstance(name, str) for name in value):
                raise ImproperlyConfigured("DURABLEFLOW['API_WORKFLOWS'] must hold workflow names (strings)")
            return frozenset(value)
        if name == "PREPARED_STATEMENTS":
            if not isinstance(value, bool):
                raise ImproperlyConfigured(f"DURABLEFLOW['PREPARED_STATEMENTS'] must be True or False, not {value!r}")
            return value
        if name == "MAX_LOST_DELIVERIES":
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ImproperlyConfigured(f"DURABLEFLOW['MAX_LOST_DELIVERIES'] must be a whole number of at least 1, not {value!r}")
            return value
        if name in (
            "LEASE_SECONDS",
            "SWEEP_INTERVAL",
            "MAX_PAYLOAD_BYTES",
            "SWEEP_BATCH_SIZE",
            "RESULT_RECHECK_SECONDS",
        ):
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
                raise ImproperlyConfigured(f"DURABLEFLOW[{name!r}] must be a positive number, not {value!r}")
        return value

    def reload(self) -> None:
        self._cache.clear()


df_settings = Settings()


@receiver(setting_changed)
def _reload(*, setting: str, **kwargs: Any) -> None:
    if setting == "DURABLEFLOW":
        df_settings.reload()
