"""Deliveries that die with their process, held against both storages: a claim that finds the
previous delivery's lease still set counts a lost delivery; more than ``max_lost_deliveries`` in
a row fail the run with ``DELIVERY_LOST`` before its code runs again, and a delivery that ends
(an outcome, a suspension) starts the count over."""

from __future__ import annotations

import pytest

import durableflow
from tests.harness import LEASE_SECONDS, SETTINGS

LIMIT = SETTINGS.max_lost_deliveries
bodies: list[str] = []


@pytest.fixture(autouse=True)
def _reset():
    bodies.clear()


def body(name):
    bodies.append(name)
    return name


@durableflow.workflow("contract.lost")
def lost_wf(ctx, params):
    ctx.step.run("first", body, "first")
    if (params or {}).get("nap"):
        ctx.step.sleep("nap", 5)
    return ctx.step.run("second", body, "second")


def _die(backend, execution_id, times):
    """Deliveries that claim the lease and die holding it; each lease is waited out."""
    for _ in range(times):
        assert backend.journal(execution_id).claim() is not None
        backend.advance(LEASE_SECONDS + 1)


def test_more_lost_deliveries_in_a_row_than_the_limit_fail_the_run_before_its_code_runs(backend):
    execution_id = backend.start("contract.lost")
    _die(backend, execution_id, LIMIT + 1)

    assert backend.deliver(execution_id) == "failed"

    execution = backend.get(execution_id)
    assert execution.error["code"] == "DELIVERY_LOST"
    assert f"the last {LIMIT + 1} deliveries" in execution.error["message"]
    assert execution.error["detail"] == {"lost_deliveries": LIMIT + 1}
    assert bodies == []
    assert execution.deliveries == LIMIT + 2
    # An operator who fixed the cause retries it: the count starts over.
    backend.retry(execution_id)
    assert backend.deliver(execution_id) == "completed"
    assert bodies == ["first", "second"]


def test_as_many_as_the_limit_are_delivered_again(backend):
    execution_id = backend.start("contract.lost")
    _die(backend, execution_id, LIMIT)

    assert backend.deliver(execution_id) == "completed"
    assert backend.get(execution_id).lost_deliveries == LIMIT


def test_a_delivery_that_ends_starts_the_count_over(backend):
    execution_id = backend.start("contract.lost", {"nap": True})
    _die(backend, execution_id, LIMIT)
    assert backend.deliver(execution_id) == "suspended"  # gave its lease back

    # Past the nap by a second: SQLite's clock has milliseconds, and a claim within a
    # millisecond of the timer's write may read a moment before its due time.
    backend.advance(6)
    _die(backend, execution_id, LIMIT)
    assert backend.run(execution_id).status == "completed"
    assert bodies == ["first", "second"]
