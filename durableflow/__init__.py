"""durableflow: durable workflows for Django, run by Celery workers.

import durableflow

@durableflow.workflow("greet", version="1")
def greet(ctx, params):
    name = ctx.step.run("load-name", load_name, params["user_id"])
    ctx.step.sleep("wait", 60)
    return {"greeting": f"Hello {name}"}

execution = durableflow.start("greet", {"user_id": 7})
"""

from __future__ import annotations

from typing import Any

from durableflow import exceptions, stores, streams
from durableflow.documents.tasks import task
from durableflow.engine.store_types import define_store
from durableflow.exceptions import (  # noqa: F401 - re-exported
    ChildExecutionError,
    DocumentError,
    DurableflowError,
    EffectDeliveryError,
    ExecutionFailed,
    ExecutionNotFound,
    InvalidTransition,
    NonDeterminismError,
    RetryableError,
    ScheduleError,
    StepError,
    StepTimeout,
    WaitTimeout,
    WorkflowEffectError,
    WorkflowStartError,
    WorkflowValueError,
)
from durableflow.options import Concurrency, RateLimit, Retry
from durableflow.registry import workflow

__version__ = "0.1.0"

__all__ = [
    # defining workflows
    "workflow",
    "task",
    "Retry",
    "RateLimit",
    "Concurrency",
    # durable stores (``stores.get`` / ``stores.update`` need Django's apps to be loaded)
    "define_store",
    "stores",
    # reading runs' streams (``streams.read`` needs Django's apps to be loaded)
    "streams",
    # steering runs (need Django's apps to be loaded)
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
    # schedules: django-celery-beat periodic tasks (need Django's apps to be loaded)
    "schedule",
    "unschedule",
    # errors
    *exceptions.__all__,
]

# The verbs touch the ORM, which must not be imported while Django loads its apps (this
# package is imported then); they are resolved on first use instead.
_OPERATIONS = frozenset(
    {"start", "start_many", "cancel", "retry", "rerun", "fork", "result", "send_event", "signal", "complete_token"}
)


_SCHEDULES = frozenset({"schedule", "unschedule"})


def __getattr__(name: str) -> Any:
    if name in _OPERATIONS:
        from durableflow import operations

        return getattr(operations, name)
    if name in _SCHEDULES:
        from durableflow import schedules

        return getattr(schedules, name)
    raise AttributeError(f"module 'durableflow' has no attribute {name!r}")
