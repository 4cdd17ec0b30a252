"""Celery tasks: thin adapters that take ids and call the operations.

Registered under the names in ``durableflow.dispatch``, which is what everything sends.
"""

from __future__ import annotations

from celery import shared_task
from celery.signals import worker_process_shutdown, worker_shutdown

from durableflow import dispatch, operations
from durableflow.leases import keeper


# acks_late + reject_on_worker_lost: a message whose worker died is handed out again where
# the broker can; where it cannot (filesystem, SQL transports) the sweep re-sends it.
@shared_task(name=dispatch.DELIVER, acks_late=True, reject_on_worker_lost=True, ignore_result=True)
def deliver(execution_id: str) -> str:
    return operations.deliver(execution_id)


@shared_task(name=dispatch.RUN_ITEM, acks_late=True, reject_on_worker_lost=True, ignore_result=True)
def run_item(execution_id: str, key: str) -> str:
    return operations.run_item(execution_id, key)


@shared_task(name=dispatch.SWEEP, ignore_result=True)
def sweep() -> dict[str, int]:
    return operations.sweep()


@shared_task(name=dispatch.PRUNE, ignore_result=True)
def prune(older_than: str | float) -> int:
    return operations.prune(older_than)


@worker_process_shutdown.connect(weak=False)  # prefork pool processes
@worker_shutdown.connect(weak=False)  # solo and threads pools: the heartbeat runs in the main process
def _stop_heartbeat(**kwargs) -> None:
    """A warm shutdown never waits for the heartbeat: stop it (leases still held simply lapse)."""
    keeper.stop(timeout=1.0)
