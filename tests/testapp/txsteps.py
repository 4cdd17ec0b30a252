"""Workflows with transactional steps, run by real worker processes (tests/live/test_transactions_live.py).

Their bodies write project models inside the step's transaction. What a test must see from
outside while a body is still running (it cannot see uncommitted rows) goes to files in a
directory the test names.
"""

from __future__ import annotations

import os
import sqlite3
import time
from pathlib import Path

from django.db import connection
from django.db.models import F

import durableflow
from durableflow import Retry
from tests.testapp.models import Counter, Marker


def _note(directory: str, name: str) -> int:
    """Append this process's pid to a file; return how many lines it had before."""
    path = Path(directory) / name
    before = path.read_text().count("\n") if path.exists() else 0
    with path.open("a") as file:
        file.write(f"{os.getpid()}\n")
    return before


def _increment(name: str, hold: float, directory: str) -> int:
    Counter.objects.filter(name=name).update(value=F("value") + 1)
    inside = Path(directory) / f"inside-{os.getpid()}"  # the test kills this process while it exists
    inside.touch()
    time.sleep(hold)
    inside.unlink()
    return Counter.objects.get(name=name).value


@durableflow.workflow("t.tx-counter")
def tx_counter(ctx, params):
    name, hold, directory = params["name"], params["hold"], params["dir"]
    return [ctx.step.transaction(f"add-{i}", _increment, name, hold, directory) for i in range(params["n"])]


def _write_once_then_hold(tag: str, directory: str, hold: float) -> int:
    Marker.hit(tag)
    if _note(directory, f"{tag}.started") == 0:
        time.sleep(hold)  # the first writer is stopped here by the test
    return os.getpid()


@durableflow.workflow("t.tx-zombie")
def tx_zombie(ctx, params):
    return ctx.step.transaction("write", _write_once_then_hold, params["tag"], params["dir"], params["hold"])


def _write_then_fail_once(tag: str, directory: str) -> dict:
    seen = Marker.count(tag)
    Marker.hit(tag)
    attempt = _note(directory, f"{tag}.attempts") + 1
    if attempt == 1:
        raise ValueError("the body failed after writing")
    return {"seen": seen, "attempt": attempt}


@durableflow.workflow("t.tx-raise")
def tx_raise(ctx, params):
    retry = Retry(max_attempts=2, interval=params["interval"])
    return ctx.step.transaction("write", _write_then_fail_once, params["tag"], params["dir"], retry=retry)


def _locked_increment(name: str, hold: float) -> int:
    row = Counter.objects.select_for_update().get(name=name)
    time.sleep(hold)  # the other execution waits for the row lock (SQLite: for the write lock)
    row.value += 1
    row.save(update_fields=["value"])
    return row.value


@durableflow.workflow("t.tx-locked")
def tx_locked(ctx, params):
    return ctx.step.transaction("increment", _locked_increment, params["name"], params["hold"])


_tries: dict[str, int] = {}


def _conflict_on_first_try(tag: str) -> int:
    """Write, then fail the first try the way the database does under contention."""
    Marker.hit(tag)
    _tries[tag] = _tries.get(tag, 0) + 1
    if _tries[tag] == 1:
        if connection.vendor == "postgresql":
            import psycopg

            raise psycopg.errors.SerializationFailure("could not serialize access due to concurrent update")
        raise sqlite3.OperationalError("database is locked")
    return _tries[tag]


@durableflow.workflow("t.tx-conflict")
def tx_conflict(ctx, params):
    return ctx.step.transaction("write", _conflict_on_first_try, params["tag"])
