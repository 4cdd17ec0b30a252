"""Every Celery task durableflow sends or runs, by name, and the one way it sends them.

Tasks are sent by name (``send_task``) on the project's own Celery app, as
django-celery-beat does, so that nothing that sends a task imports the task modules: the
verbs do not import ``durableflow.tasks`` and ``durableflow.tasks`` imports the verbs.
Settings, system checks and the demo project use these names too.
"""

from __future__ import annotations

import logging

__all__ = ["DELIVER", "SWEEP", "RUN_ITEM", "TASKS", "send"]

logger = logging.getLogger("durableflow.dispatch")

DELIVER = "durableflow.deliver"  # args: (execution_id,) - one delivery of an execution
SWEEP = "durableflow.sweep"  # no args - wake due executions, re-send lost wake-ups
RUN_ITEM = "durableflow.run_item"  # args: (execution_id, key) - one map item or run(queue=) attempt

TASKS = (DELIVER, SWEEP, RUN_ITEM)

# A publish never blocks its caller for long: one bounded retry. A message that cannot be
# sent is not lost work (the row is committed); the sweep sends it again once overdue.
_RETRY_POLICY = {"max_retries": 1, "interval_start": 0, "interval_step": 0.2, "interval_max": 0.2}


def send(task: str, args: tuple, queue: str) -> bool:
    """Send ``task(*args)`` to ``queue``; never raise, never hang for long."""
    from celery import current_app

    try:
        current_app.send_task(task, args=args, queue=queue, retry=True, retry_policy=_RETRY_POLICY)
    except Exception:  # noqa: BLE001 - any broker failure; the sweep is the fallback
        logger.warning("could not send %s%r to queue %s; the sweep will resend it", task, args, queue, exc_info=True)
        return False
    return True
