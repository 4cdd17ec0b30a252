"""The public names (SPEC §2-§4, §14) are pinned here: changing them is a decision."""

from __future__ import annotations

import pickle

import pytest

import durableflow
from durableflow import exceptions


def test_public_api_is_pinned():
    assert sorted(durableflow.__all__) == sorted(
        [
            "workflow",
            "task",
            "Retry",
            "RateLimit",
            "Concurrency",
            "define_store",
            "stores",
            "streams",
            "start",
            "start_many",
            "cancel",
            "retry",
            "rerun",
            "fork",
            "result",
            "send_event",
            "signal",
            "complete_token",
            "schedule",
            "unschedule",
            "DurableflowError",
            "ScheduleError",
            "WorkflowStartError",
            "WorkflowValueError",
            "NonDeterminismError",
            "RetryableError",
            "StepTimeout",
            "StepError",
            "WaitTimeout",
            "ChildExecutionError",
            "WorkflowEffectError",
            "EffectDeliveryError",
            "ExecutionFailed",
            "ExecutionNotFound",
            "InvalidTransition",
            "DocumentError",
        ]
    )
    for name in durableflow.__all__:
        assert getattr(durableflow, name) is not None


@pytest.mark.parametrize("name", exceptions.__all__)
def test_every_error_is_exported_with_a_code_and_pickles(name):
    cls = getattr(exceptions, name)
    assert getattr(durableflow, name) is cls
    error = cls() if cls is not exceptions.RetryableError else cls("later", max_attempts=2)
    assert isinstance(error.code, str) and error.code
    assert str(error).startswith(error.code)
    copy = pickle.loads(pickle.dumps(error))
    assert (type(copy), copy.code, copy.message) == (cls, error.code, error.message)


def test_wait_timeout_is_a_timeout_error():
    assert issubclass(durableflow.WaitTimeout, TimeoutError)
    assert durableflow.WaitTimeout().code == "WAIT_TIMEOUT"


def test_unknown_attributes_still_raise():
    with pytest.raises(AttributeError):
        durableflow.no_such_thing  # noqa: B018
