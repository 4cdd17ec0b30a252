"""The sweep: wake due executions and re-send wake-ups nobody acted on."""

from __future__ import annotations

from datetime import timedelta
from typing import TYPE_CHECKING, Any

from durableflow import exceptions
from durableflow.engine import logs, names
from durableflow.engine.context import iso
from durableflow.engine.starts import DEADLINE_EXCEEDED
from durableflow.engine.states import ExecutionStatus, StepStatus
from durableflow.engine.storage import NOW

if TYPE_CHECKING:
    from durableflow.engine.verbs import Engine

__all__ = ["Sweeping"]

logger = logs.logger("durableflow")

S = ExecutionStatus


class Sweeping:
    """The ``sweep`` verb (a mixin of ``Engine``)."""

    def sweep(self: Engine) -> dict[str, int]:
        """Wake due executions and re-send wake-ups nobody acted on; return counts.

        Leases held on this machine by processes that are gone are given back at once
        (``_take_over_gone``); others are waited out.

        Safe to run from several beats at once: the due and stale rows are locked by the
        sweep that reads them (others skip them), waking is a compare-and-set from
        ``waiting`` to ``pending``, and a duplicate wake-up is harmless because only one
        delivery can claim an execution's lease. A message that cannot be sent is logged
        and skipped; the next sweep sends it again.
        """
        storage, batch = self.storage, int(self.settings.sweep_batch_size)
        with storage.atomic():
            due = storage.lock_due(batch)
            if due:
                self._complete_timers(due)
                woken = self.wake(pk for pk, _, _ in due)  # sent once this commits
        with storage.atomic():
            stale = storage.lock_stale(self.settings.lease_seconds, batch)
            if stale:
                storage.update_executions([pk for pk, _ in stale], {"enqueued_at": NOW})
                for pk, queue in stale:
                    storage.enqueue(names.DELIVER, (pk,), queue)
        overdue = self._cancel_overdue(batch)
        taken = self._take_over_gone(batch)
        items = self._resend_items(batch)
        # A child whose end did not wake its waiting parent (the worker died after its outcome).
        stranded = storage.stranded_waiters(batch)
        if stranded:
            with storage.atomic():
                self.wake(stranded)
        # Store waiters woken while their execution was still running (see engine/stores.py).
        stores = self.sweep_store_waiters(batch)
        # Queued runs of a concurrency key whose slots were freed without admitting them.
        admitted = self.sweep_slots(batch)
        if due or stale or overdue or taken or items or stores or admitted:
            logger.info(
                "sweep: %d due (%d woken), %d stale, %d past their deadline, %d taken over, %d items resent, "
                "%d woken for stores, %d admitted to a concurrency slot",
                len(due),
                len(woken) if due else 0,
                len(stale),
                overdue,
                taken,
                items,
                stores,
                admitted,
            )
        return {
            "due": len(due),
            "stale": len(stale),
            "deadlines": overdue,
            "taken_over": taken,
            "items": items,
            "stores": stores,
            "admitted": admitted,
        }

    def _cancel_overdue(self: Engine, limit: int) -> int:
        """Cancel the unfinished executions whose deadline passed (``DEADLINE_EXCEEDED``), with
        their compensations, as ``cancel`` does. The rows are locked by this sweep until it
        commits (another sweep skips them, then finds their cancel asked), so a run is cancelled
        once however many beats sweep."""
        cancelled = 0
        with self.storage.atomic():
            for pk, deadline_at in self.storage.lock_overdue(limit):
                try:
                    self.cancel(pk, f"its deadline ({iso(deadline_at)}) passed", code=DEADLINE_EXCEEDED)
                except exceptions.InvalidTransition as exc:  # pragma: no cover - the row is locked here
                    logger.warning(
                        "sweep: execution %s is past its deadline but could not be cancelled: %s",
                        pk,
                        exc,
                        extra={"execution_id": pk},
                    )
                    continue
                cancelled += 1
        return cancelled

    def _take_over_gone(self: Engine, limit: int) -> int:
        """End the leases held on this machine by processes that are gone (a killed pool child
        whose message the broker lost: the filesystem transport), and deliver those executions
        again at once, not after their lease. Each is fenced by the token found, so a delivery
        that took the lease over meanwhile keeps it. The lease is made expired, its token kept:
        the next claim counts the delivery that died as lost (``max_lost_deliveries``)."""
        holders, storage = self.settings.lease_holders(), self.storage
        if holders.host is None:
            return 0
        taken, expired = 0, None
        for pk, queue, token, holder in storage.leased_on(holders.host, limit):
            if not holders.gone(holder, token):
                continue
            expired = expired or storage.now() - timedelta(seconds=1)
            if storage.update_execution(pk, {"lease_expires_at": expired, "enqueued_at": NOW}, token=token):
                logger.warning(
                    "sweep: the holder of execution %s's lease (%s) is gone; delivering it again",
                    pk,
                    holder,
                    extra={"execution_id": pk},
                )
                storage.enqueue(names.DELIVER, (pk,), queue)
                taken += 1
        return taken

    def _complete_timers(self: Engine, due: list[tuple[str, str, dict[str, Any] | None]]) -> None:
        """Record the due timers as over, for the whole batch at once.

        Each woken delivery would otherwise spend a write transaction on it. Safe here: the
        executions were waiting (no delivery holds them) and are locked by this transaction; a
        delivery that finds the record still waiting completes it itself. Steps are matched by
        exact (execution, key) pairs, so an execution waiting on several things at once only
        has the step that is due completed.
        """
        timers = [(pk, waiting) for pk, _, waiting in due if waiting is not None and waiting.get("kind") == "timer"]
        pairs = [(pk, waiting["step"]) for pk, waiting in timers]
        if pairs:
            self.storage.complete_steps(
                pairs,
                {"status": StepStatus.COMPLETED, "attempts": 1, "finished_at": NOW},
                kind="sleep",
                statuses=[StepStatus.WAITING],
            )
