"""The promises every scenario is held to, checked in SQL once its faults stopped and its runs drained.

Each check returns ``(ok, detail)``: ``detail`` counts what broke (or what was checked), so that
the report says more than a tick. ``sql`` runs a query on the chaos database and returns its rows,
and spells what PostgreSQL and SQLite spell apart (``tests/chaos/sql.py``).

"No body after its record" compares the ledger's time (the database's clock when the body's
row was inserted, in autocommit, at the body's start) with the commit time of the step's
record (PostgreSQL's ``track_commit_timestamp``; the record's ``finished_at`` where it is not
known, and on SQLite): a body that began after its step's record had committed ran for a step
already recorded. Two bodies of one step that both began before the record are allowed
(bodies run at least once).
"""

from __future__ import annotations

from tests.chaos.driver import TERMINAL, Outcome
from tests.chaos.sql import PostgresSql, SqliteSql

Sql = PostgresSql | SqliteSql


def no_lost_execution(sql: Sql, outcome: Outcome):
    found = dict(sql(f"SELECT id, status FROM durableflow_execution WHERE {sql.among('id')}", [outcome.ids]))
    missing = [i for i in outcome.ids if i not in found]
    unfinished = sorted(i for i, status in found.items() if status not in TERMINAL)
    return not missing and not unfinished, {"started": len(outcome.ids), "missing": len(missing),
                                            "unfinished": unfinished[:10]}  # fmt: skip


def no_expired_running_lease(sql: Sql, outcome: Outcome):
    rows = sql(
        "SELECT id FROM durableflow_execution WHERE status = 'running' "
        f"AND (lease_expires_at IS NULL OR lease_expires_at < {sql.now})",
        [],
    )
    return not rows, {"running with an expired lease": [r[0] for r in rows][:10]}


def one_record_per_step(sql: Sql, outcome: Outcome):
    among = sql.among("execution_id")
    rows = sql(
        f"SELECT execution_id, key, count(*) FROM durableflow_steprecord WHERE {among} "
        "GROUP BY execution_id, key HAVING count(*) > 1",
        [outcome.ids],
    )
    (records,) = sql(f"SELECT count(*) FROM durableflow_steprecord WHERE {among}", [outcome.ids])[0]
    return not rows, {"records": records, "duplicates": [f"{e}/{k}" for e, k, _ in rows][:10]}


def no_body_after_its_record(sql: Sql, outcome: Outcome):
    rows = sql(
        "SELECT l.execution_id, l.step, l.pid FROM testapp_chaosledger l "
        "JOIN durableflow_steprecord r ON r.execution_id = l.execution_id AND r.key = l.step "
        f"WHERE l.kind = 'body' AND {sql.among('l.execution_id')} AND l.at > {sql.recorded_at('r')}",
        [outcome.ids],
    )
    (bodies, again) = sql(
        "SELECT count(*), count(*) - count(DISTINCT execution_id || ' ' || step) FROM testapp_chaosledger "
        f"WHERE kind = 'body' AND {sql.among('execution_id')}",
        [outcome.ids],
    )[0]
    return not rows, {"bodies": bodies, "bodies run again before the record": again,
                      "after the record": [f"{e}/{s} (pid {p})" for e, s, p in rows][:10]}  # fmt: skip


def _twice(sql: Sql, kind: str, outcome: Outcome) -> list[tuple]:
    """``(execution, step)`` where the ledger has more than one ``kind`` row."""
    return sql(
        f"SELECT execution_id, step FROM testapp_chaosledger WHERE kind = %s AND {sql.among('execution_id')} "
        "GROUP BY execution_id, step HAVING count(*) > 1",
        [kind, outcome.ids],
    )


def _ledger_rows(sql: Sql, kind: str, outcome: Outcome) -> int:
    query = f"SELECT count(*) FROM testapp_chaosledger WHERE kind = %s AND {sql.among('execution_id')}"
    return sql(query, [kind, outcome.ids])[0][0]


def effects_at_most_once(sql: Sql, outcome: Outcome):
    rows = _twice(sql, "perform", outcome)
    # A completed run's effect was performed, once (its receipt came from that one perform).
    unperformed = sql(
        f"SELECT e.id FROM durableflow_execution e WHERE {sql.among('e.id')} AND e.status = 'completed' "
        "AND e.workflow = 'chaos.flow' AND NOT EXISTS (SELECT 1 FROM testapp_chaosledger l "
        "WHERE l.kind = 'perform' AND l.step = e.id || ':charge')",
        [outcome.ids],
    )
    return not rows and not unperformed, {
        "performs": _ledger_rows(sql, "perform", outcome),
        "twice": [step for _, step in rows][:10],
        "completed without a perform": [r[0] for r in unperformed][:10],
    }


def compensations_at_most_once(sql: Sql, outcome: Outcome):
    twice = _twice(sql, "compensate", outcome)
    # A run cancelled after its compensable step was recorded compensated it; a completed one did not.
    wrong = sql(
        f"SELECT e.id, e.status FROM durableflow_execution e WHERE {sql.among('e.id')} "
        "AND e.workflow = 'chaos.flow' AND "
        "(SELECT count(*) FROM testapp_chaosledger l WHERE l.kind = 'compensate' AND l.execution_id = e.id) <> "
        "CASE WHEN e.status IN ('cancelled', 'compensated', 'compensation_failed') AND EXISTS (SELECT 1 FROM "
        "durableflow_steprecord r WHERE r.execution_id = e.id AND r.key = 'reserve') THEN 1 ELSE 0 END",
        [outcome.ids],
    )
    return not twice and not wrong, {
        "compensations": _ledger_rows(sql, "compensate", outcome),
        "twice": [f"{e}/{s}" for e, s in twice][:10],
        "not once where due": [f"{e} ({s})" for e, s in wrong][:10],
    }


def store_counter_exact(sql: Sql, outcome: Outcome):
    if outcome.store is None:
        return True, {"store": None}
    rows = sql(
        "SELECT CAST(state->>'n' AS integer) FROM durableflow_store WHERE name = 'chaos-counter' AND store_id = %s",
        [outcome.store],
    )
    value = rows[0][0] if rows else 0
    (bumps,) = sql(
        f"SELECT count(*) FROM durableflow_steprecord WHERE key = 'bump' AND {sql.among('execution_id')}",
        [outcome.ids],
    )[0]
    return value == bumps, {"counter": value, "bump records": bumps}


def no_run_failed_by_a_fault(sql: Sql, outcome: Outcome):
    rows = sql(
        f"SELECT id, status, error->>'code', workflow, result FROM durableflow_execution WHERE {sql.among('id')}",
        [outcome.ids],
    )
    from tests.testapp.chaos import expected_result

    wrong = []
    for execution_id, status, code, workflow, result in rows:
        if status not in TERMINAL:
            continue  # counted as lost
        if status not in outcome.expect[execution_id] or code not in outcome.codes[execution_id]:
            wrong.append(f"{execution_id}: {status} {code}")
        elif status == "completed" and workflow == "chaos.flow" and sql.json(result) != expected_result(execution_id):
            wrong.append(f"{execution_id}: completed with {result}")
    by_status: dict[str, int] = {}
    for _, status, *_ in rows:
        by_status[status] = by_status.get(status, 0) + 1
    return not wrong, {"statuses": by_status, "unexpected": wrong[:10]}


CHECKS = {
    "no lost execution": no_lost_execution,
    "no expired running lease": no_expired_running_lease,
    "one record per step": one_record_per_step,
    "no body after its record": no_body_after_its_record,
    "effects at most once": effects_at_most_once,
    "compensations at most once": compensations_at_most_once,
    "store counter exact": store_counter_exact,
    "no run failed by a fault": no_run_failed_by_a_fault,
}
NAMES = tuple(CHECKS)


def check(sql: Sql, outcome: Outcome) -> dict[str, dict]:
    results = {}
    for name, function in CHECKS.items():
        ok, detail = function(sql, outcome)
        results[name] = {"ok": bool(ok), "detail": detail}
    return results
