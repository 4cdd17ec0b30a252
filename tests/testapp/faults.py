"""Database failures under a delivery: the workflows that meet them, and how a test causes them.

``t.faults`` runs one of each kind of storage operation a delivery makes (a step write, a store
change, an effect hold, a wait registration, the claim and the outcome around them) and catches
``Exception`` around each step, as careless workflow code would: what it caught is its result.

``inject(op, tag)`` plans one failure of the ORM storage's method ``op`` in whichever worker
process first calls it with ``tag`` among its arguments. The workers started with
``DURABLEFLOW_TEST_FAULTS`` (a folder) carry it out: on PostgreSQL the process's own connection
is terminated by another connection (``pg_terminate_backend``, waiting for the backend to end)
and the real operation then fails on it; on SQLite the operation raises what Django raises for
a database that stayed locked past its timeout. A plan is a file: the process that deletes it
is the one that fails, so each plan fails exactly once among all processes.
"""

from __future__ import annotations

import functools
import os
import time
from datetime import datetime
from pathlib import Path

import durableflow

FaultStore = durableflow.define_store("t-fault-store", initial=lambda: {"n": 0})

# The storage operations a test can make fail, and what each stands for.
OPS = {
    "claim": "the claim",
    "insert_step": "a step write",
    "write_store": "a store change",
    "hold_effect": "an effect hold",
    "add_waiter": "a wait registration",
    "record_outcome": "the outcome",
}


def _bump(draft):
    draft["n"] += 1


def _lookup(effect_id: str) -> dict:
    return {"status": "not-found"}


def _perform(effect_id: str) -> dict:
    return {"receipt": effect_id}


@durableflow.workflow("t.faults")
def faults(ctx, params):
    caught: list[str] = []

    def attempt(call):
        try:
            return call()
        except Exception as exc:  # noqa: BLE001 - careless workflow code: a database failure must not get here
            caught.append(f"{type(exc).__name__}: {exc}")
            return None

    one = attempt(lambda: ctx.step.run("one", lambda: 1))
    store = ctx.step.store(FaultStore, id=params["store"])
    bumped = attempt(lambda: store.update("bump", _bump))
    receipt = attempt(
        lambda: ctx.step.effect(
            "charge",
            effect_id=params["effect_id"],
            operation="t.fault/v1",
            input={},
            retry_in=1,
            lookup=_lookup,
            perform=_perform,
        )
    )
    go = attempt(lambda: ctx.step.wait_for_signal("go", "go"))
    two = attempt(lambda: ctx.step.run("two", lambda: 2))
    return {"caught": caught, "one": one, "version": getattr(bumped, "version", None), "receipt": receipt, "go": go,
            "two": two}  # fmt: skip


def _database_error(message: str):
    from django.db import OperationalError

    raise OperationalError(message)


@durableflow.workflow("t.user-db-error")
def user_db_error(ctx, params):
    """A step body of the user's own that fails with a database error: the user's failure, recorded."""
    params = params or {}
    try:
        ctx.step.run("query", _database_error, params.get("message", "canceling statement due to statement timeout"))
    except Exception as exc:
        if params.get("catch"):
            return {"caught": f"{type(exc).__name__}: {exc}"}
        raise
    return {"caught": None}


@durableflow.workflow("t.catch-everything")
def catch_everything(ctx, params):
    caught, step = None, None
    try:
        step = ctx.step.run("step", lambda: 1)
    except BaseException as exc:  # noqa: BLE001 - what no workflow should do: it still cannot keep a fault
        caught = type(exc).__name__
    return {"caught": caught, "step": step}


def _query_canceled() -> None:
    from django.db import OperationalError

    raise OperationalError("canceling statement due to user request")


@durableflow.workflow("t.tx-db-error")
def tx_db_error(ctx, params):
    """A transactional step whose body's own query fails: the step's failure, raised into the workflow."""
    try:
        ctx.step.transaction("query", _query_canceled)
    except Exception as exc:  # noqa: BLE001 - what careless workflow code does
        return {"caught": f"{type(exc).__name__}: {exc}"}
    return {"caught": None}


def double(value: int) -> int:
    return value * 2


@durableflow.workflow("t.faults-map")
def faults_map(ctx, params):
    return ctx.step.map("double", double, params["items"])


def _work(hold: float) -> int:
    time.sleep(hold)
    return 1


@durableflow.workflow("t.storm")
def storm(ctx, params):
    """Two steps, a nap until ``until``, three steps: while the database drops the connections.

    With ``catch``, every step is in a ``try``/``except Exception`` that appends what it caught
    to the file ``report`` (outside the database, which is what fails): it must stay empty.
    """

    def step(call):
        if not params["catch"]:
            return call()
        try:
            return call()
        except Exception as exc:  # noqa: BLE001 - a database failure must never get here
            with open(params["report"], "a") as report:
                report.write(f"{ctx.execution_id}: {type(exc).__name__}: {exc}\n")
            return 0

    total = sum(step(lambda key=key: ctx.step.run(key, _work, params["hold"])) for key in ("s0", "s1"))
    step(lambda: ctx.step.sleep_until("nap", datetime.fromisoformat(params["until"])))
    for key in ("s2", "s3", "s4"):
        total += step(lambda key=key: ctx.step.run(key, _work, 0))
    return {"total": total}


# Worker-side injection ------------------------------------------------------------------------


def plan_dir() -> Path | None:
    folder = os.environ.get("DURABLEFLOW_TEST_FAULTS")
    return Path(folder) if folder else None


def inject(folder: Path, op: str, tag: str) -> Path:
    """Plan one failure of ``op`` for the first call that mentions ``tag``; the plan's file."""
    if op not in OPS:
        raise ValueError(f"{op!r} is not one of {sorted(OPS)}")
    plan = folder / op
    plan.write_text(tag)
    return plan


def _mentions(tag: str, args: tuple, kwargs: dict) -> bool:
    return tag in repr(args) or tag in repr(kwargs)


def terminate(connection) -> None:
    """Terminate ``connection``'s PostgreSQL backend from another connection, as a failover or
    ``pg_terminate_backend`` does, and wait until it is gone: neither Django nor psycopg knows
    until a statement fails on it."""
    import psycopg

    connection.ensure_connection()
    backend = connection.connection.info.backend_pid
    db = connection.settings_dict
    with psycopg.connect(
        dbname=db["NAME"], user=db["USER"], password=db["PASSWORD"], host=db["HOST"], port=db["PORT"], autocommit=True
    ) as killer:
        killer.execute("SELECT pg_terminate_backend(%s, 5000)", [backend])


def _fail(storage) -> None:
    connection = storage.connection
    if connection.vendor != "postgresql":
        from django.db import OperationalError

        raise OperationalError("database is locked")
    terminate(connection)


def _faulty(op: str, method, folder: Path):
    @functools.wraps(method)
    def call(self, *args, **kwargs):
        plan = folder / op
        if plan.exists():
            try:
                tag = plan.read_text()
                if _mentions(tag, args, kwargs):
                    plan.unlink()  # only one process gets to delete it
                    _fail(self)
            except FileNotFoundError:
                pass
        return method(self, *args, **kwargs)

    return call


def install() -> None:
    """In a worker started with ``DURABLEFLOW_TEST_FAULTS``: carry out the plans found there."""
    folder = plan_dir()
    if folder is None:
        return
    from durableflow.orm import OrmStorage

    for op in OPS:
        setattr(OrmStorage, op, _faulty(op, getattr(OrmStorage, op), folder))


install()
