"""Receivers of durableflow's signals in every process that loads the test app (workers too), and
the workflow that shows them: each writes a ``Marker`` named for what it was told, with its pid."""

from __future__ import annotations

from django.dispatch import receiver

import durableflow
from durableflow import RetryableError, signals
from tests.testapp.models import Marker

WORKFLOW = "t.observed"


def _flaky(tag: str, failures: int, attempts: int) -> int:
    Marker.hit(f"{tag}:attempt")
    attempt = Marker.count(f"{tag}:attempt")
    if attempt <= failures:
        raise RetryableError(f"attempt {attempt} failed", max_attempts=attempts, retry_interval=0.2)
    return attempt


@durableflow.workflow(WORKFLOW)
def observed(ctx, params):
    ctx.step.run("first", lambda: 1)
    attempts = params.get("attempts", params["failures"] + 1)
    return ctx.step.run("flaky", _flaky, params["tag"], params["failures"], attempts)


@receiver(signals.execution_started, dispatch_uid="testapp-started")
def _started(sender, execution_id, workflow, status, **kwargs):
    if workflow == WORKFLOW:
        Marker.hit(f"{execution_id}:started:{status}")


@receiver(signals.step_failed, dispatch_uid="testapp-step-failed")
def _step_failed(sender, execution_id, workflow, step_key, status, attempt, error, **kwargs):
    if workflow == WORKFLOW:
        Marker.hit(f"{execution_id}:step_failed:{step_key}:{attempt}:{status}")


@receiver(signals.execution_finished, dispatch_uid="testapp-finished")
def _finished(sender, execution_id, workflow, status, error, **kwargs):
    if workflow == WORKFLOW:
        Marker.hit(f"{execution_id}:finished:{status}")
