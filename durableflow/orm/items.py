"""The ORM storage's step bodies run as their own tasks (map items, run(queue=)).

An item is a journal record (kind ``item``) written by the delivery that fans out, then
claimed and finished by item tasks. Its ``attempts`` count is the fence: a claim increments
it, and only the attempt that claimed last may record the outcome.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.db import transaction
from django.db.models import F, Q

from durableflow.engine.states import RUNNABLE, STEP_UNFINISHED, StepStatus
from durableflow.orm.core import OrmCore

__all__ = ["OrmItems"]

ITEM = "item"
_UNFINISHED = sorted(STEP_UNFINISHED)


class OrmItems(OrmCore):
    """Item records on the models (a part of ``OrmStorage``)."""

    def _items(self, execution_id: str | None = None):
        rows = self._steps().filter(kind=ITEM)
        return rows if execution_id is None else rows.filter(execution_id=execution_id)

    def claim_item(self, execution_id: str, key: str, lease_seconds: float) -> tuple[int, dict[str, Any]] | None:
        expired = self._now() - timedelta(seconds=lease_seconds)
        with transaction.atomic(using=self.alias):
            claimed = (
                self._items(execution_id)
                .filter(key=key, execution__status__in=list(RUNNABLE))
                .filter(Q(status=StepStatus.WAITING) | Q(status=StepStatus.RUNNING, started_at__lt=expired))
                .update(status=StepStatus.RUNNING, attempts=F("attempts") + 1, started_at=self._now())
            )
            if not claimed:
                return None
            return self._items(execution_id).filter(key=key).values_list("attempts", "meta").get()

    def finish_item(self, execution_id: str, key: str, attempt: int, values: dict[str, Any]) -> bool:
        rows = self._items(execution_id).filter(key=key, status=StepStatus.RUNNING, attempts=attempt)
        return bool(rows.update(**self._values(values)))

    def send_next_item(self, execution_id: str) -> tuple[str, str] | None:
        unsent = self._items(execution_id).filter(status=StepStatus.WAITING, started_at__isnull=True).order_by("id")
        # Two finishing items may pick the same one: the conditional UPDATE gives it to one.
        for pk, key, meta in unsent.values_list("pk", "key", "meta")[:4]:
            if self._steps().filter(pk=pk, started_at__isnull=True).update(started_at=self._now()):
                return key, (meta or {}).get("queue", "")
        return None

    def items_left(self, execution_id: str) -> int:
        return self._items(execution_id).filter(status__in=_UNFINISHED).count()

    def lock_stale_items(self, resend_after: float, limit: int) -> list[tuple[str, str, str]]:
        overdue = self._now() - timedelta(seconds=resend_after)
        with transaction.atomic(using=self.alias):
            rows = (
                self._items()
                .filter(status__in=_UNFINISHED, started_at__lt=overdue, execution__status__in=list(RUNNABLE))
                .order_by("started_at")
                .select_for_update(skip_locked=True, of=("self",))
            )
            stale = list(rows.values_list("pk", "execution_id", "key", "meta")[:limit])
            if stale:
                self._steps().filter(pk__in=[pk for pk, *_ in stale]).update(
                    status=StepStatus.WAITING, started_at=self._now()
                )
        return [(execution_id, key, (meta or {}).get("queue", "")) for _, execution_id, key, meta in stale]
