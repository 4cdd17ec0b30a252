"""What the engine tells an observer: a run started, a run finished, a step attempt failed.

``EngineSettings.notify`` (Django's face sends its signals from it: ``durableflow.signals``)
is called as ``notify(event, fields)`` with one of the events below, once the transaction that
made it true has committed (``Storage.after_commit``: at once outside a transaction), in the
process that committed it, and never for a transaction that rolled back. So an observer
never hears of a state nobody else can read, and hears of each once per commit: a run starts
at its first claim (``deliveries == 1``), finishes at the outcome or cancel that ends it, and a
step attempt fails when its failure is recorded (each attempt once: a write another delivery
made first is not this delivery's).

An observer that raises is logged and ignored: it never breaks the delivery or the verb that
announced it, whose work is committed already.
"""

from __future__ import annotations

from typing import Any, Callable

from durableflow.engine import logs
from durableflow.engine.records import StepRecordData
from durableflow.engine.states import STEP_AFTER_FAILED_ATTEMPT

__all__ = ["STARTED", "FINISHED", "STEP_FAILED", "EVENTS", "Notify", "announce", "failed_attempt"]

logger = logs.logger("durableflow.signals")

STARTED = "execution_started"  # execution_id, workflow, status ("running")
FINISHED = "execution_finished"  # execution_id, workflow, status (its terminal status), error
STEP_FAILED = "step_failed"  # execution_id, workflow, step_key, status (the step's), attempt, error
EVENTS = (STARTED, FINISHED, STEP_FAILED)

Notify = Callable[[str, dict[str, Any]], None]

# A step record that reports a failed attempt: failed for good, or waiting for the next attempt.
_FAILED_ATTEMPT = STEP_AFTER_FAILED_ATTEMPT


def announce(storage: Any, notify: Notify | None, event: str, **fields: Any) -> None:
    """Tell ``notify`` of ``event`` once the current transaction of ``storage`` commits."""
    if notify is None:
        return
    storage.after_commit(lambda: _tell(notify, event, fields))


def failed_attempt(record: StepRecordData) -> bool:
    """Whether writing ``record`` records a failed attempt of its step."""
    return record.error is not None and record.status in _FAILED_ATTEMPT


def _tell(notify: Notify, event: str, fields: dict[str, Any]) -> None:
    try:
        notify(event, fields)
    except Exception:  # an observer never breaks what it observes
        logger.exception(
            "the observer of %s raised; ignored",
            event,
            extra={"execution_id": fields.get("execution_id"), "workflow": fields.get("workflow")},
        )
