"""Celery tasks: thin adapters that take ids and call the operations.

Registered under the names in ``durableflow.dispatch``, which is what everything sends. Every
task heals the process's database connections before its work and after it
(``durableflow.healing``). A delivery or an item task the database failed under ends without
an outcome (``faults.FAULT``) and is sent again with back-off (``faults.resend_delay``), at
most ``faults.MAX_RESENDS`` times in a row; after that the sweep sends it again.
"""

from __future__ import annotations

from typing import Any, Callable

from celery import Task, shared_task
from celery.signals import worker_process_shutdown, worker_shutdown

from durableflow import dispatch, operations, schedules
from durableflow.engine import faults, logs, tracing
from durableflow.healing import heal
from durableflow.orm.leases import keeper

logger = logs.logger("durableflow.delivery")


class _Healed(Task):
    """The base of durableflow's tasks: the process's connections healed around each run."""

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        heal()
        try:
            return super().__call__(*args, **kwargs)
        finally:
            heal()


def _task(name: str, **options: Any) -> Callable[[Callable[..., Any]], Task]:
    """A durableflow task, registered under ``name``."""
    return shared_task(name=name, base=_Healed, ignore_result=True, **options)


# acks_late + reject_on_worker_lost: a message whose worker died is handed out again where
# the broker can; where it cannot (filesystem, SQL transports) the sweep re-sends it.
@_task(dispatch.DELIVER, bind=True, acks_late=True, reject_on_worker_lost=True, max_retries=None)
def deliver(self: Task, execution_id: str) -> str:
    with tracing.received(self.request.headers):  # the sender's span context, if tracing is on
        return _again_after_fault(self, operations.deliver(execution_id))


@_task(dispatch.RUN_ITEM, bind=True, acks_late=True, reject_on_worker_lost=True, max_retries=None)
def run_item(self: Task, execution_id: str, key: str) -> str:
    with tracing.received(self.request.headers):
        return _again_after_fault(self, operations.run_item(execution_id, key))


@_task(dispatch.SWEEP)
def sweep() -> dict[str, int]:
    return operations.sweep()


@_task(dispatch.PRUNE)
def prune(older_than: str | float) -> int:
    return operations.prune(older_than)


@_task(dispatch.TICK)
def tick(schedule: str, workflow: str, params: Any = None, catch_up: str = "one") -> int:
    """Beat sends it for each tick of a schedule (``durableflow.schedule``); how many executions
    the tick named (started now or before). A tick lost to a database failure is made up by the
    next one (``catch_up``)."""
    return len(schedules.start_due(schedule, workflow, params, catch_up))


def _again_after_fault(task: Task, happened: str) -> str:
    """Send the task again with back-off if the database failed under it (``Task.retry``: the
    same message, counted in ``request.retries``, with a countdown)."""
    if happened != faults.FAULT or task.request.called_directly:
        return happened
    resends = task.request.retries
    if resends >= faults.MAX_RESENDS:
        args = tuple(task.request.args or ())
        logger.warning("%s%r: the database failed %d times in a row; the sweep sends it again", task.name, args,
                       resends + 1, extra={"execution_id": args[0] if args else None})  # fmt: skip
        return happened
    # A publish that fails rejects the message (Celery's Reject): the sweep sends it again.
    raise task.retry(countdown=faults.resend_delay(resends))


@worker_process_shutdown.connect(weak=False)  # prefork pool processes
@worker_shutdown.connect(weak=False)  # solo and threads pools: the heartbeat runs in the main process
def _stop_heartbeat(**kwargs) -> None:
    """A warm shutdown never waits for the heartbeat: stop it (leases still held simply lapse)."""
    keeper.stop(timeout=1.0)
