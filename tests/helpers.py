"""Helpers shared by the tests."""

from __future__ import annotations

import uuid

from tests.cluster import wait_for

__all__ = ["uid", "wait_for", "status_of", "wait_status", "steps_of"]


def uid(prefix: str = "t") -> str:
    return f"{prefix}-{uuid.uuid4().hex[:12]}"


def status_of(execution_id: str) -> str:
    from durableflow.models import Execution

    return Execution.objects.values_list("status", flat=True).get(pk=execution_id)


def wait_status(execution_id: str, status: str = "completed", timeout: float = 60):
    """Poll the database until the execution has ``status``; fail at once on another final one."""
    from durableflow.engine.states import TERMINAL
    from durableflow.models import Execution

    def reached():
        execution = Execution.objects.get(pk=execution_id)
        if execution.status != status and execution.status in TERMINAL:
            raise AssertionError(f"execution {execution_id} ended {execution.status}: {execution.error}")
        return execution if execution.status == status else None

    return wait_for(reached, timeout=timeout, what=f"execution {execution_id} to be {status}")


def steps_of(execution_id: str) -> list:
    from durableflow.models import StepRecord

    return list(StepRecord.objects.filter(execution_id=execution_id).order_by("id"))
