"""The one way durableflow sends its Celery tasks (named in ``durableflow.engine.names``).

Tasks are sent by name (``send_task``) on the project's own Celery app, as
django-celery-beat does, so that nothing that sends a task imports the task modules: the
verbs do not import ``durableflow.tasks`` and ``durableflow.tasks`` imports the verbs.
Settings, system checks and the demo project use these names too.
"""

from __future__ import annotations

from contextlib import AbstractContextManager, nullcontext
from typing import Any

from durableflow.engine import logs, transactions
from durableflow.engine.names import DELIVER, PRUNE, RUN_ITEM, SWEEP, TASKS, TICK

__all__ = ["DELIVER", "SWEEP", "RUN_ITEM", "PRUNE", "TICK", "TASKS", "send", "send_many", "guard_publishes"]

logger = logs.logger("durableflow.dispatch")

# A publish never blocks its caller for long: one bounded retry. A message that cannot be
# sent is not lost work (the row is committed); the sweep sends it again once overdue.
_RETRY_POLICY = {"max_retries": 1, "interval_start": 0, "interval_step": 0.2, "interval_max": 0.2}
# The tasks keep no result. Said in the message too: else a sender whose project has a result
# backend subscribes to each sent task's result (Redis pub/sub), one subscription per start,
# held for the life of the process, and one more round trip on every send.
_OPTIONS = {"retry": True, "retry_policy": _RETRY_POLICY, "ignore_result": True}


def send(task: str, args: tuple, queue: str, headers: dict[str, str] | None = None) -> bool:
    """Send ``task(*args)`` to ``queue``; never raise, never hang for long.

    ``headers``: message headers on top of Celery's (a span context: ``durableflow.engine.tracing``).
    Inside a transactional step's body it refuses instead (``TRANSACTION_FORBIDDEN_CALL``).
    """
    _refuse_inside_transaction(task)
    from celery import current_app

    options = _OPTIONS if headers is None else {**_OPTIONS, "headers": headers}
    try:
        current_app.send_task(task, args=args, queue=queue, **options)
    except Exception:
        named = {"execution_id": args[0]} if task in (DELIVER, RUN_ITEM) else {}  # sent after a commit: no scope
        if task == RUN_ITEM:
            named["step_key"] = args[1]
        logger.warning(
            "could not send %s%r to queue %s; the sweep will resend it", task, args, queue, exc_info=True, extra=named
        )
        return False
    return True


def send_many(task: str, args_list: list[tuple], queue: str, headers: dict[str, str] | None = None) -> bool:
    """Send ``task(*args)`` for each of ``args_list`` through one producer (one broker
    connection from Celery's pool, its publishes batched where kombu can: one Redis pipeline);
    never raise. After the first failure the rest are left to the sweep rather than each
    waiting out its own retry. ``headers``: as ``send``'s, on each message."""
    _refuse_inside_transaction(task)
    from celery import current_app

    options = _OPTIONS if headers is None else {**_OPTIONS, "headers": headers}
    try:
        with current_app.producer_or_acquire() as producer, _batch(producer):
            for args in args_list:
                current_app.send_task(task, args=args, queue=queue, producer=producer, **options)
    except Exception:
        logger.warning(
            "could not send all %d %s messages to queue %s; the sweep will resend those lost",
            len(args_list),
            task,
            queue,
            exc_info=True,
        )
        return False
    return True


def _batch(producer: Any) -> AbstractContextManager[Any]:
    batch = getattr(producer, "batch", None)  # kombu >= 5.7
    return batch() if batch is not None else nullcontext()


def guard_publishes() -> None:
    """Refuse Celery publishes from transactional step bodies (connected once, at app start)."""
    from celery.signals import before_task_publish

    before_task_publish.connect(_before_publish, weak=False, dispatch_uid="durableflow.refuse-in-transactions")


def _before_publish(sender: str | None = None, **kwargs: Any) -> None:
    # Raises a BaseException: Celery logs and drops a receiver's Exception, and the publish
    # must not happen.
    _refuse_inside_transaction(sender or "?")


def _refuse_inside_transaction(task: str) -> None:
    transactions.refuse(
        code="TRANSACTION_FORBIDDEN_CALL",
        message=f"its body sent the Celery task {task!r}; a message cannot be taken back if the transaction "
        "rolls back, and would be sent again when it runs again. Send it once the step has committed "
        "(transaction.on_commit, task.delay_on_commit) or from a ctx.step.run step.",
    )
