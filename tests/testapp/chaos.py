"""The chaos suite's workflows (tests/chaos/), and the ledger their bodies write.

Every step body, effect perform and compensation writes one ``ChaosLedger`` row when it
begins, on a psycopg connection of its own in autocommit: outside every transaction
durableflow opens, so that what ran stays counted whatever the delivery around it became. The
suite's invariants compare these rows with the journal (a body that began after its step's
record committed ran twice; two performs of one effect id charged twice).

A write that meets a dropped connection or a restarting server connects again and retries
(the same ``nonce``, so a retried insert that did commit is not counted twice): the faults the
suite injects must not reach the bodies as errors of their own, which would fail their runs.
On SQLite (the embedded default) the connection is a ``sqlite3`` one to the same file, and a
write retries while the file is locked; the row's time is then taken once the write lock is held.
"""

from __future__ import annotations

import functools
import os
import signal
import sqlite3
import threading
import time
import uuid
from datetime import datetime

import durableflow

ChaosCounter = durableflow.define_store("chaos-counter", initial=lambda: {"n": 0})

RETRY_FOR = 90.0  # seconds a ledger write keeps retrying (longer than any fault the suite injects)

_INSERT = (
    "INSERT INTO testapp_chaosledger (nonce, execution_id, step, kind, pid, at) "
    "VALUES (%s, %s, %s, %s, %s, {now}) ON CONFLICT (nonce) DO NOTHING"
)
# The database's clock, in the spelling each one compares with the journal's datetimes.
_NOW = {"postgresql": "clock_timestamp()", "sqlite": "strftime('%Y-%m-%d %H:%M:%f', 'now')"}
_lock = threading.Lock()
_connection = None
_connection_pid = None


def _vendor() -> str:
    from django.db import connections

    return connections["default"].vendor


def _connect():
    """This process's ledger connection (a forked pool process makes its own)."""
    global _connection, _connection_pid
    from django.db import connections

    if _connection is None or _connection_pid != os.getpid():
        db = connections["default"].settings_dict
        if _vendor() == "sqlite":
            _connection = sqlite3.connect(db["NAME"], timeout=20, isolation_level=None)
        elif _vendor() == "postgresql":
            import psycopg

            _connection = psycopg.connect(
                dbname=db["NAME"], user=db["USER"], password=db["PASSWORD"], host=db["HOST"], port=db["PORT"],
                autocommit=True, connect_timeout=3,
            )  # fmt: skip
        else:
            raise RuntimeError("the chaos ledger needs PostgreSQL or SQLite (run the suite with ./run chaos)")
        _connection_pid = os.getpid()
    return _connection


def _sql(query: str, args: list):
    """Run ``query`` on the ledger connection, again on a new one while the database is away."""
    global _connection
    import psycopg

    if _vendor() == "sqlite":
        query = query.replace("%s", "?")
    deadline = time.monotonic() + RETRY_FOR
    while True:
        try:
            with _lock:
                cursor = _connect().execute(query, args)
                return cursor.fetchall() if cursor.description else None
        except (psycopg.OperationalError, sqlite3.OperationalError):
            # A dropped PostgreSQL connection, or a SQLite file locked for longer than the timeout.
            _connection = None
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


def note(execution_id: str, step: str, kind: str) -> None:
    _sql(_INSERT.format(now=_NOW[_vendor()]), [uuid.uuid4().hex, execution_id, step, kind, os.getpid()])


def noted(execution_id: str, step: str, kind: str) -> int:
    return _sql(
        "SELECT count(*) FROM testapp_chaosledger WHERE execution_id = %s AND step = %s AND kind = %s",
        [execution_id, step, kind],
    )[0][0]


# Step bodies, the effect and the compensation ---------------------------------------------------


def body(execution_id: str, step: str, hold: float) -> str:
    note(execution_id, step, "body")
    time.sleep(hold)
    return step


def _bump(draft):
    draft["n"] += 1


def _perform(effect_id: str, die: bool = False) -> dict:
    execution_id = effect_id.rsplit(":", 1)[0]
    note(execution_id, effect_id, "perform")
    if die:  # the charge is made, its answer never comes back: the next delivery must look it up
        _die_once(execution_id, "in-perform")
    return {"charge": effect_id}


def _lookup(effect_id: str) -> dict:
    """The fake service answers from the ledger: a perform that began is a charge made."""
    execution_id = effect_id.rsplit(":", 1)[0]
    if noted(execution_id, effect_id, "perform"):
        return {"status": "settled", "result": {"charge": effect_id}}
    return {"status": "not-found"}


def _undo(execution_id: str, step: str):
    def compensation(result):
        note(execution_id, step, "compensate")

    return compensation


def _die_once(execution_id: str, where: str) -> None:
    """SIGKILL this process, once per execution: between a step's commit and the next step."""
    if not noted(execution_id, where, "die"):
        note(execution_id, where, "die")
        os.kill(os.getpid(), signal.SIGKILL)


def expected_result(execution_id: str) -> dict:
    """What ``chaos.flow`` completes with."""
    return {"s0": "s0", "charge": {"charge": f"{execution_id}:charge"}, "s1": "s1", "s2": "s2"}


@durableflow.workflow("chaos.flow")
def flow(ctx, params):
    """Steps, a compensable step, a store counter, an effect, optionally a wait and a nap
    (``nap`` seconds, or ``until`` an ISO time); ``die_after_commit`` and ``die_in_perform``
    SIGKILL the process once, after the first step's commit or in the effect's perform."""
    eid, hold = ctx.execution_id, params.get("hold", 0.2)
    out = {"s0": ctx.step.run("s0", body, eid, "s0", hold)}
    if params.get("die_after_commit"):
        _die_once(eid, "after-s0")
    ctx.step.run("reserve", body, eid, "reserve", hold, compensate=_undo(eid, "reserve"))
    ctx.step.store(ChaosCounter, id=params["store"]).update("bump", _bump)
    out["charge"] = ctx.step.effect(
        "charge",
        effect_id=f"{eid}:charge",
        operation="chaos.charge/v1",
        input={},
        retry_in=1,
        lookup=_lookup,
        perform=functools.partial(_perform, die=bool(params.get("die_in_perform"))),
    )
    if params.get("wait"):
        ctx.step.wait_for_signal("go", "go")
    if params.get("nap"):
        ctx.step.sleep("nap", params["nap"])
    elif params.get("until"):
        ctx.step.sleep_until("nap", datetime.fromisoformat(params["until"]))
    out["s1"] = ctx.step.run("s1", body, eid, "s1", hold)
    out["s2"] = ctx.step.run("s2", body, eid, "s2", hold)
    return out


def _kill_myself(execution_id: str) -> None:
    note(execution_id, "poison", "body")
    os.kill(os.getpid(), signal.SIGKILL)


@durableflow.workflow("chaos.poison")
def poison(ctx, params):
    """A step that kills its process every time it runs."""
    ctx.step.run("s0", body, ctx.execution_id, "s0", 0)
    ctx.step.run("poison", _kill_myself, ctx.execution_id)
    return "unreachable"
