"""How long a durable timer may be, held against both storages: ``ctx.step.sleep`` takes seconds
from 0 to a century, and anything else (NaN, the infinities, 1e15) raises ``INVALID_DELAY`` into
the workflow at the call, with nothing recorded, instead of a raw ``ValueError`` or
``OverflowError`` from the date arithmetic."""

from __future__ import annotations

import math

import pytest

import durableflow
from durableflow import WorkflowValueError
from durableflow.engine.steps.timers import MAX_SLEEP_SECONDS

BAD = {"nan": math.nan, "inf": math.inf, "-inf": -math.inf, "1e15": 1e15, "-1": -1, "-0.5": -0.5}
BAD["a century and a second"] = MAX_SLEEP_SECONDS + 1


@durableflow.workflow("contract.sleep-bound")
def sleep_bound_wf(ctx, params):
    seconds = BAD.get(params["seconds"], params["seconds"])
    try:
        ctx.step.sleep("nap", seconds)
    except WorkflowValueError as exc:
        return {"caught": exc.code, "message": exc.message}
    return {"slept": True}


@pytest.mark.parametrize("seconds", list(BAD))
def test_a_sleep_no_date_can_end_is_refused_with_a_code_at_the_call(backend, seconds):
    execution_id = backend.start("contract.sleep-bound", {"seconds": seconds})

    backend.deliver(execution_id)

    result = backend.get(execution_id).result
    assert result["caught"] == "INVALID_DELAY"
    assert "seconds must be a number from 0 to 3,162,240,000 (a century)" in result["message"]
    assert backend.records(execution_id) == []


@durableflow.workflow("contract.sleep-nan")
def sleep_nan_wf(ctx, params):
    ctx.step.sleep("nap", math.nan)


def test_uncaught_it_fails_the_run_with_its_code(backend):
    execution_id = backend.start("contract.sleep-nan")
    backend.deliver(execution_id)

    execution = backend.get(execution_id)
    assert (execution.status, execution.error["code"]) == ("failed", "INVALID_DELAY")


@pytest.mark.parametrize("seconds", [0, 0.5, MAX_SLEEP_SECONDS])  # 0.5: a fraction not due before its outcome
def test_a_century_is_the_longest_sleep(backend, seconds):
    execution_id = backend.start("contract.sleep-bound", {"seconds": seconds})
    outcome = backend.deliver(execution_id)
    assert outcome == ("completed" if seconds == 0 else "suspended"), outcome
    if seconds:
        assert backend.get(execution_id).waiting_for["kind"] == "timer"


@durableflow.workflow("contract.sleep-type")
def sleep_type_wf(ctx, params):
    ctx.step.sleep("nap", params["seconds"])


@pytest.mark.parametrize("seconds", [True, "5", None, [1]])
def test_a_sleep_that_is_not_a_number_is_a_type_error(backend, seconds):
    execution_id = backend.start("contract.sleep-type", {"seconds": seconds})
    backend.deliver(execution_id)

    error = backend.get(execution_id).error
    assert error["type"] == "builtins.TypeError"
    assert error["message"] == "ctx.step.sleep(key, seconds) needs a number of seconds"
