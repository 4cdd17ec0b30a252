"""One driving interface over both journals, for the contract suite.

Deliveries run in the test process, one at a time, under the test's control; time moves
only when a test says so (the in-memory clock, or an offset added to the database clock).
"""

from __future__ import annotations

import dataclasses
from datetime import datetime, timedelta
from typing import Any

from django.utils import timezone

from durableflow import operations
from durableflow.engine import driver
from durableflow.engine.context import EngineSettings
from durableflow.engine.journal import TERMINAL, ExecutionStatus, StepRecordData
from durableflow.engine.memory import InMemoryBackend
from durableflow.registry import registry

LEASE_SECONDS = 60
SETTINGS = EngineSettings()


class MemoryHarness:
    name = "memory"

    def __init__(self) -> None:
        self.backend = InMemoryBackend(registry, lease_seconds=LEASE_SECONDS, settings=SETTINGS)

    def start(self, workflow, params=None, **kwargs) -> str:
        return self.backend.start(workflow, params, **kwargs).id

    def journal(self, execution_id: str):
        return self.backend.journal(execution_id)

    def deliver(self, execution_id: str) -> str:
        return driver.deliver(self.journal(execution_id), registry, SETTINGS)

    def get(self, execution_id: str):
        return self.backend.get(execution_id)

    def records(self, execution_id: str) -> list[StepRecordData]:
        return self.backend.records(execution_id)

    def inject(self, execution_id: str, record: StepRecordData) -> None:
        self.backend.executions[execution_id].records[record.key] = record

    def advance(self, seconds: float) -> None:
        self.backend.advance(seconds)

    def now(self) -> datetime:
        return self.backend.clock()

    def cancel(self, execution_id: str, reason: str | None = None):
        return self.backend.cancel(execution_id, reason)

    def retry(self, execution_id: str):
        return self.backend.retry(execution_id)

    # shared ---------------------------------------------------------------------------

    def run(self, execution_id: str, *, max_deliveries: int = 50) -> Any:
        """Deliver, moving the clock to each due time, until the execution ends or blocks."""
        for _ in range(max_deliveries):
            execution = self.get(execution_id)
            if execution.status in TERMINAL:
                return execution
            if execution.status == ExecutionStatus.WAITING:
                if execution.wake_at is None:
                    return execution
                gap = (execution.wake_at - self.now()).total_seconds()
                if gap > 0:
                    self.advance(gap + 0.01)
            self.deliver(execution_id)
        raise AssertionError(f"execution {execution_id} still runs after {max_deliveries} deliveries")


class OrmHarness(MemoryHarness):
    name = "orm"

    def __init__(self) -> None:
        self.offset = timedelta(0)
        self._journals: list = []

    def start(self, workflow, params=None, **kwargs) -> str:
        return operations.start(workflow, params, queue="contract-suite", **kwargs).id

    def journal(self, execution_id: str):
        from durableflow.journal import OrmJournal

        journal = OrmJournal(execution_id, lease_seconds=LEASE_SECONDS, clock_offset=self.offset)
        self._journals.append(journal)
        return journal

    def close(self) -> None:
        """Release the leases of journals a test claimed by hand: the process's heartbeat
        thread would otherwise go on renewing them after the test database is gone."""
        for journal in self._journals:
            journal.close()

    def get(self, execution_id: str):
        from durableflow.models import Execution

        return Execution.objects.get(pk=execution_id)

    def records(self, execution_id: str) -> list[StepRecordData]:
        from durableflow.models import StepRecord

        fields = ("key", "kind", "status", "attempts", "value", "error", "meta", "started_at", "finished_at")
        return [
            StepRecordData(**values)
            for values in StepRecord.objects.filter(execution_id=execution_id).order_by("id").values(*fields)
        ]

    def inject(self, execution_id: str, record: StepRecordData) -> None:
        from durableflow.models import StepRecord

        StepRecord.objects.create(execution_id=execution_id, **dataclasses.asdict(record))

    def advance(self, seconds: float) -> None:
        self.offset += timedelta(seconds=seconds)

    def now(self) -> datetime:
        return timezone.now() + self.offset

    def cancel(self, execution_id: str, reason: str | None = None):
        return operations.cancel(execution_id, reason)

    def retry(self, execution_id: str):
        return operations.retry(execution_id)
