"""Every scenario, for every seed of the tier: the faults, then the drain, then the invariants.

A scenario passes when its executions all finished within ``R`` of the faults' end and every
invariant held (``tests/chaos/invariants.py``); each adds its row to the report, pass or fail.
A scenario that needs what the stack does not offer is skipped and reported as not applicable.
"""

from __future__ import annotations

import time
import uuid

import pytest

from tests.chaos import backends, invariants
from tests.chaos.conftest import stack, tier
from tests.chaos.driver import R, TIERS, Outcome, seeded
from tests.chaos.scenarios import NEEDS, SCENARIOS

SIZE = TIERS[tier()]
try:
    BACKEND: backends.Backend | None = backends.current()
except ValueError:  # not a stack the suite runs on: the chaos fixture says so
    BACKEND = None
ABSENT = {} if BACKEND is None else {
    name: why for name in SCENARIOS if (why := backends.not_applicable(BACKEND, NEEDS.get(name)))
}
CASES = [(scenario, seed) for scenario in SCENARIOS if scenario not in ABSENT for seed in SIZE.seeds]


@pytest.mark.chaos
def test_each_invariant_fails_on_a_breach_of_its_promise(chaos):
    """Breaches written by hand around the warm-up run (``t.ping``, one step ``pong``): every
    check but "one record per step" fails (that breach cannot be written: a unique constraint)."""
    victim, store = "chaos-warm-up", f"selftest-{uuid.uuid4().hex[:6]}"
    ledger = (
        "INSERT INTO testapp_chaosledger (nonce, execution_id, step, kind, pid, at) "
        f"VALUES (%s, %s, %s, %s, 0, {chaos.sql.now})"
    )
    restore = "UPDATE durableflow_execution SET status = 'completed', lease_expires_at = NULL WHERE id = %s"
    chaos.ensure(beats=0)  # no sweep may act on the run made to look stuck
    try:
        for step, kind in [("pong", "body"), *[(f"{victim}:charge", "perform")] * 2, *[("reserve", "compensate")] * 2]:
            chaos.sql(ledger, [uuid.uuid4().hex, victim, step, kind])
        chaos.sql(
            "INSERT INTO durableflow_store (name, store_id, instance_id, version, state, has_waiters) "
            "VALUES ('chaos-counter', %s, 'selftest', 1, '{\"n\": 5}', false)",
            [store],
        )
        expired = chaos.sql.seconds_ago(60)
        chaos.sql(f"UPDATE durableflow_execution SET status = 'running', lease_expires_at = {expired} WHERE id = %s",
                  [victim])  # fmt: skip
        outcome = Outcome(store=store)
        outcome.add([victim, "chaos-never-started"], ("failed",))
        stuck = invariants.check(chaos.sql, outcome)
        chaos.sql(restore, [victim])
        finished = invariants.check(chaos.sql, outcome)
    finally:
        chaos.sql("DELETE FROM testapp_chaosledger WHERE execution_id = %s", [victim])
        chaos.sql("DELETE FROM durableflow_store WHERE store_id = %s", [store])
        chaos.sql(restore, [victim])
        chaos.ensure()

    broken = {name for name, result in stuck.items() if not result["ok"]}
    broken |= {name for name, result in finished.items() if not result["ok"]}
    assert broken == set(invariants.NAMES) - {"one record per step"}
    assert finished["no run failed by a fault"]["detail"]["unexpected"] == [f"{victim}: completed None"]
    assert stuck["no expired running lease"]["detail"]["running with an expired lease"] == [victim]


@pytest.mark.chaos
def test_scenarios_that_do_not_apply_are_reported(report):
    """Listed in the report with the reason, and skipped here in so many words."""
    assert stack() == BACKEND
    for scenario, reason in ABSENT.items():
        report.not_applicable(scenario, reason)
    if ABSENT:
        pytest.skip("; ".join(f"{scenario} does not apply: {reason}" for scenario, reason in ABSENT.items()))


@pytest.mark.chaos
@pytest.mark.timeout(300)
@pytest.mark.parametrize(("scenario", "seed"), CASES, ids=[f"{s}-{seed}" for s, seed in CASES])
def test_scenario_keeps_every_promise(chaos, report, scenario, seed):
    chaos.ensure()
    tag = f"chaos-{scenario}-{seed}-{uuid.uuid4().hex[:6]}"
    began = time.monotonic()
    outcome = SCENARIOS[scenario](chaos, seeded(seed, scenario), SIZE, tag)
    drained = chaos.drain(outcome.ids, timeout=R)
    drain = None if drained is None else time.monotonic() - outcome.calm_at
    outcome.tally(chaos.sql)
    results = invariants.check(chaos.sql, outcome)
    broken = sorted(name for name, result in results.items() if not result["ok"])
    report.add({
        "scenario": scenario,
        "seed": seed,
        "runs": len(outcome.ids),
        "faults": outcome.faults,
        "fault_seconds": round(outcome.calm_at - began, 1),
        "drain_seconds": None if drain is None else round(drain, 1),
        "invariants": results,
        "passed": drain is not None and not broken,
    })  # fmt: skip
    assert drain is not None, f"not every execution finished within R = {R} s: {results['no lost execution']}"
    assert not broken, {name: results[name]["detail"] for name in broken}
