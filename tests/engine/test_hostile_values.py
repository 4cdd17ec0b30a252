"""Hostile values get one verdict on every backend (SPEC §14, "Values, the same on every backend").

Each value below goes to the in-memory backend (``WorkflowTester``) and to the database this
run of the suite uses (SQLite or PostgreSQL), once as the params of a start and once as a
step's value. Everywhere it must be either accepted and read back equal, or refused with the
same code and the same JSON pointer with nothing written (a refused step value is a failed
step the workflow catches) — never a raw database error or a ``RecursionError``.
"""

from __future__ import annotations

import math
import re
import time
from typing import Any, Callable

import pytest

import durableflow
from durableflow import WorkflowStartError, WorkflowValueError, operations
from durableflow.engine.states import TERMINAL
from durableflow.testing import WorkflowTester

QUEUE = "hostile-values"  # no worker consumes it: deliveries run in this process
ACCEPTED = "accepted"


def _nested(levels: int) -> list:
    value: list = []
    for _ in range(levels - 1):
        value = [value]
    return value


# name: (builds the value, its verdict as a step value: ACCEPTED or (code, JSON pointer))
CASES: dict[str, tuple[Callable[[], Any], Any]] = {
    "lone surrogate in a value": (lambda: {"a": [0, {"b": "x\ud800y"}]}, ("INVALID_STEP_VALUE", "/a/1/b")),
    "lone surrogate in a key": (lambda: {"a": {"k\udfffey": 1}}, ("INVALID_STEP_VALUE", "/a")),
    "NUL in a key": (lambda: {"a": [{"n\x00": 1}]}, ("INVALID_STEP_VALUE", "/a/0")),
    "NUL in a value": (lambda: {"a": "x\x00"}, ("INVALID_STEP_VALUE", "/a")),
    "nested 100,000 deep": (lambda: _nested(100_000), ("INVALID_STEP_VALUE", "/0" * 512)),
    "nested 513 deep": (lambda: _nested(513), ("INVALID_STEP_VALUE", "/0" * 512)),
    "nested 512 deep": (lambda: _nested(512), ACCEPTED),
    "nested 400 deep": (lambda: _nested(400), ACCEPTED),
    "2**70": (lambda: {"n": 2**70}, ("INVALID_STEP_VALUE", "/n")),
    "-2**63-1": (lambda: {"n": [-(2**63) - 1]}, ("INVALID_STEP_VALUE", "/n/0")),
    "2**63-1 and -2**63": (lambda: {"max": 2**63 - 1, "min": -(2**63)}, ACCEPTED),
    "1e300": (lambda: {"f": [1.5, 1e300]}, ("INVALID_STEP_VALUE", "/f/1")),
    "-1e16": (lambda: {"f": -1e16}, ("INVALID_STEP_VALUE", "/f")),
    "floats below 1e16 and tiny ones": (lambda: {"f": [9999999999999998.0, 1e-300, -2.5e-7, 0.1]}, ACCEPTED),
    "NaN": (lambda: {"x": math.nan}, ("INVALID_STEP_VALUE", "/x")),
    "Infinity": (lambda: {"x": [math.inf]}, ("INVALID_STEP_VALUE", "/x/0")),
    "-Infinity": (lambda: [-math.inf], ("INVALID_STEP_VALUE", "/0")),
    "10 MB string": (lambda: "x" * 10_000_000, ("PAYLOAD_TOO_LARGE", None)),
    "the neighbours of the surrogate block, and an emoji": (lambda: {"é": "\ud7ff\ue000\U0001f600"}, ACCEPTED),
}


CASE_NAMES = list(CASES)


@durableflow.workflow("hostile.echo")
def echo_wf(ctx, params):
    return params


@durableflow.workflow("hostile.step")
def step_value_wf(ctx, params):
    try:
        value = ctx.step.run("hostile", _build, params["case"])
    except WorkflowValueError as exc:
        return {"caught": exc.code, "path": exc.detail.get("path"), "message": exc.message}
    # Suspend once: the next delivery replays the step from the journal, so the result is
    # the value as the backend stored it and read it back.
    ctx.step.sleep("read-it-back", 0.001)
    return value


def _build(case: str) -> Any:
    return CASES[case][0]()


# Verdicts -------------------------------------------------------------------------------


def _start_refusal(exc: WorkflowStartError) -> tuple[str, str | None, str]:
    pointer = re.match(r"params: not a durable value at (\S+): ", exc.message)
    assert exc.detail.get("path") == (pointer and pointer.group(1))  # also as data, for the API
    return exc.code, pointer and pointer.group(1), exc.message


def _start_in_memory(tester: WorkflowTester, params: Any) -> Any:
    try:
        execution = tester.start("hostile.echo", params)
    except WorkflowStartError as exc:
        assert tester.storage.tables.executions == {}
        return _start_refusal(exc)
    assert tester.get(execution.id).params == params
    assert tester.run_until_finished(execution.id) == params
    return ACCEPTED


def _start_in_database(params: Any) -> Any:
    from durableflow.models import Execution

    before = Execution.objects.filter(workflow="hostile.echo").count()
    try:
        execution = durableflow.start("hostile.echo", params, queue=QUEUE)
    except WorkflowStartError as exc:
        assert Execution.objects.filter(workflow="hostile.echo").count() == before
        return _start_refusal(exc)
    assert Execution.objects.get(pk=execution.id).params == params
    assert _deliver_until_finished(execution.id).result == params
    return ACCEPTED


def _step_in_memory(tester: WorkflowTester, case: str) -> Any:
    execution = tester.start("hostile.step", {"case": case})
    result = tester.run_until_finished(execution.id)
    record = next(r for r in tester.records(execution.id) if r.key == "hostile")
    return _step_verdict(record.status, record.value, record.error, result)


def _step_in_database(case: str) -> Any:
    from durableflow.models import StepRecord

    execution = durableflow.start("hostile.step", {"case": case}, queue=QUEUE)
    result = _deliver_until_finished(execution.id).result
    record = StepRecord.objects.get(execution_id=execution.id, key="hostile")
    return _step_verdict(record.status, record.value, record.error, result)


def _step_verdict(status: str, value: Any, error: dict | None, result: Any) -> Any:
    if status == "completed":
        assert value == result  # the value as journaled, and as replay read it back
        return ACCEPTED, value
    assert status == "failed", status
    code, path = error["code"], (error.get("detail") or {}).get("path")
    # The workflow caught the refusal as the error the journal recorded.
    assert (result["caught"], result["path"]) == (code, path)
    return code, path, result["message"]


def _deliver_until_finished(execution_id: str, timeout: float = 30):
    from durableflow.models import Execution

    deadline = time.monotonic() + timeout
    while True:
        operations.deliver(execution_id)
        execution = Execution.objects.get(pk=execution_id)
        if execution.status in TERMINAL:
            assert execution.status == "completed", execution.error
            return execution
        assert time.monotonic() < deadline, f"execution {execution_id} is still {execution.status}"
        time.sleep(0.005)  # the sleep of hostile.step is due after a millisecond


# Tests ----------------------------------------------------------------------------------


@pytest.fixture
def tester():
    # The settings the database backend runs with, so that both apply the same payload limit.
    return WorkflowTester(settings=operations.engine_settings())


@pytest.mark.parametrize("case", CASE_NAMES)
def test_params_get_the_same_verdict_on_every_backend(live_db, tester, case):
    build, expected = CASES[case]

    in_database = _start_in_database(build())
    in_memory = _start_in_memory(tester, build())

    assert in_memory == in_database
    if expected == ACCEPTED:
        assert in_memory == ACCEPTED
    else:
        code, path, message = in_memory
        assert (code, path) == ("INVALID_PARAMS", expected[1])
        assert message.startswith("params: ")


@pytest.mark.parametrize("case", CASE_NAMES)
def test_a_step_value_gets_the_same_verdict_on_every_backend(live_db, tester, case):
    build, expected = CASES[case]

    in_database = _step_in_database(case)
    in_memory = _step_in_memory(tester, case)

    assert in_memory == in_database
    if expected == ACCEPTED:
        assert in_memory == (ACCEPTED, build())
    else:
        code, path, message = in_memory
        assert (code, path) == expected
        assert message.startswith("step 'hostile' returned a value that cannot be journaled: ")
