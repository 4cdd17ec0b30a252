"""Database connections a task must not inherit broken: dropped before its work and after it.

Worker processes keep their connections from one task to the next, and nothing else cleans
them up there: Celery's Django fix-up closes them around each task only while the reuse count
is under ``CELERY_DB_REUSE_MAX`` (so, with the recommended ``1_000_000``, never), and Django's
own clean-up runs around web requests only. A connection the database dropped (a restart, a
failover, ``pg_terminate_backend``, a pooler restart) would then stay broken in that process
for every later task. ``heal()`` is what each of durableflow's tasks runs before its work and
after it, whatever happened (the tasks' base class, ``durableflow.tasks``): it drops

- a connection whose driver connection is closed or broken (psycopg's own flags, set whether
  or not the error went through Django's wrapper: a raw driver call leaves Django's
  ``errors_occurred`` unset), and
- whatever Django's ``close_if_unusable_or_obsolete()`` drops: one that met an error and no
  longer answers, one older than ``CONN_MAX_AGE``, one left outside autocommit.

A connection inside a transaction (a caller's, a test's) is left to its owner. A connection
dropped while idle is not known to be broken until a statement fails on it: a delivery that
fails so claims again at once on a new connection (``Engine.deliver``), and Django's
``CONN_HEALTH_CHECKS`` checks it before the first ORM query after ``heal()``.
"""

from __future__ import annotations

from typing import Any

from django.db import connections

from durableflow.orm import backend

__all__ = ["heal"]


def heal() -> None:
    """Drop this thread's connections that are broken or obsolete (not those in a transaction)."""
    for connection in connections.all(initialized_only=True):
        if backend.in_transaction(connection):
            continue
        if _broken(backend.driver(connection)):
            connection.close()
        else:
            connection.close_if_unusable_or_obsolete()


def _broken(driver_connection: Any) -> bool:
    """Whether the driver says its connection is gone: psycopg 3's ``closed`` and ``broken``,
    psycopg2's ``closed`` (non-zero); SQLite's connections have neither (they do not break so)."""
    if driver_connection is None:
        return False
    return bool(getattr(driver_connection, "closed", False) or getattr(driver_connection, "broken", False))
