"""One driving interface over both storages, for the contract suite.

Every verb runs through the same ``Engine``; only the storage differs (in memory, or the
ORM on SQLite / PostgreSQL). The verbs are the shipped ``WorkflowTester``'s: the memory side
is a ``WorkflowTester``, the ORM side the same tester over the ORM storage, so the whole
contract suite holds the tester too. Deliveries run in the test process, one at a time, under
the test's control; time moves only when a test says so (the in-memory clock, or an offset
added to the database clock).
"""

from __future__ import annotations

import dataclasses
from datetime import datetime, timedelta
from typing import Any

from django.utils import timezone

from durableflow.engine.holders import Holders
from durableflow.engine.records import StepRecordData
from durableflow.engine.settings import EngineSettings
from durableflow.engine.states import TERMINAL, ExecutionStatus
from durableflow.engine.verbs import Engine
from durableflow.registry import registry
from durableflow.testing import WorkflowTester

LEASE_SECONDS = 60
# Claims record no holder: a delivery a test makes "crash" (raising out of it, in this process)
# stands for one on another machine, whose lease is waited out. tests/engine/test_holders.py gives
# the engine holders of its own to show how those on this machine are taken over.
SETTINGS = EngineSettings(lease_seconds=LEASE_SECONDS, default_queue="contract-suite", holders=Holders(None))


class Harness:
    """A ``WorkflowTester`` (``self.tester``) with what the contract tests add: ``start`` answers
    the new id, ``run`` drives one execution until it ends or blocks, claims by hand
    (``journal``), writes behind the engine's back (``inject``) and the storage's own rows.
    Every other verb and reading (``deliver``, ``get``, ``cancel``, ``records``, ``sweep``,
    ``send_event``...) is the tester's, and ``storage`` and ``engine`` are its own."""

    name = ""

    def __init__(self, tester: WorkflowTester) -> None:
        self.tester = tester
        self._journals: list = []

    def __getattr__(self, name: str) -> Any:
        if name == "tester":  # not set yet: no recursion while the harness is being built
            raise AttributeError(name)
        return getattr(self.tester, name)

    @property
    def engine(self) -> Engine:
        return self.tester.engine

    @engine.setter
    def engine(self, engine: Engine) -> None:  # a test's own settings: the tester's verbs run on them
        self.tester.engine = engine

    def start(self, workflow, params=None, **kwargs) -> str:
        return self.tester.start(workflow, params, **kwargs).id

    def journal(self, execution_id: str):
        journal = self.engine.journal(execution_id)
        self._journals.append(journal)
        return journal

    def run_items(self, execution_id: str) -> list[str]:
        """Run the item tasks sent for ``execution_id`` (what a worker on their queue would do)."""
        sent = [
            r.key
            for r in self.records(execution_id)
            if r.kind == "item" and r.status == "waiting" and r.started_at is not None
        ]
        return [self.engine.run_item(execution_id, key) for key in sent]

    def close(self) -> None:
        """Release the leases of journals a test claimed by hand: the process's heartbeat
        thread would otherwise go on renewing them after the test database is gone."""
        for journal in self._journals:
            journal.close()

    def run(self, execution_id: str, *, max_deliveries: int = 50) -> Any:
        """Deliver, moving the clock to each due time, until the execution ends or blocks."""
        for _ in range(max_deliveries):
            execution = self.get(execution_id)
            if execution.status in TERMINAL:
                return execution
            if execution.status == ExecutionStatus.WAITING:
                if execution.wake_at is None:
                    if (execution.waiting_for or {}).get("kind") == "task" and self.run_items(execution_id):
                        continue
                    return execution
                gap = (execution.wake_at - self.now()).total_seconds()
                if gap > 0:
                    self.advance(gap + 0.01)
            self.deliver(execution_id)
        raise AssertionError(f"execution {execution_id} still runs after {max_deliveries} deliveries")


class MemoryHarness(Harness):
    name = "memory"

    def __init__(self) -> None:
        super().__init__(WorkflowTester(registry, settings=SETTINGS))

    def inject(self, execution_id: str, record: StepRecordData) -> None:
        """Write a record behind the engine's back (another delivery's write)."""
        self.storage.tables.steps[execution_id][record.key] = record

    def ledger(self, name: str, store_id: str) -> list[tuple[str, str, int]]:
        """The store's applied steps: (execution id, key, version), in version order."""
        entries = self.storage.tables.store_ledger.values()
        found = [(e.execution_id, e.key, e.version) for e in entries if (e.name, e.store_id) == (name, store_id)]
        return sorted(found, key=lambda entry: entry[2])

    def waiters(self, name: str, store_id: str) -> list:
        waiters = self.storage.tables.store_waiters.values()
        return sorted((w for w in waiters if (w.name, w.store_id) == (name, store_id)), key=lambda w: w.id)

    def admissions(self, key: str) -> list[tuple[str | None, str, int, bool]]:
        """The rate limit's rows for ``key``, in request order: (execution id, step key, units, admitted)."""
        return [(a.execution_id, a.step_key, a.units, a.admitted_at is not None) for a in self.storage.admissions(key)]

    def now(self) -> datetime:
        return self.clock()


class OrmHarness(Harness):
    name = "orm"

    def __init__(self) -> None:
        super().__init__(_OrmTester())

    def inject(self, execution_id: str, record: StepRecordData) -> None:
        from durableflow.models import StepRecord

        StepRecord.objects.create(execution_id=execution_id, **dataclasses.asdict(record))

    def ledger(self, name: str, store_id: str) -> list[tuple[str, str, int]]:
        from durableflow.models import StoreLedger

        rows = StoreLedger.objects.filter(name=name, store_id=store_id).order_by("version")
        return list(rows.values_list("execution_id", "key", "version"))

    def waiters(self, name: str, store_id: str) -> list:
        from durableflow.models import StoreWaiter

        return list(StoreWaiter.objects.filter(name=name, store_id=store_id).order_by("id"))

    def admissions(self, key: str) -> list[tuple[str | None, str, int, bool]]:
        from durableflow.models import RateLimitAdmission

        rows = RateLimitAdmission.objects.filter(key=key).order_by("requested_at", "id")
        return [(a.execution_id, a.step_key, a.units, a.admitted_at is not None) for a in rows]

    def advance(self, seconds: float) -> None:
        self.storage.offset += timedelta(seconds=seconds)

    def now(self) -> datetime:
        return timezone.now() + self.storage.offset


class _OrmTester(WorkflowTester):
    """``WorkflowTester``'s verbs over the ORM storage: the same engine, settings and registry
    as the memory side's, on the test database (whose clock ``OrmHarness.advance`` moves)."""

    def __init__(self) -> None:
        from durableflow.orm import OrmStorage

        super().__init__(registry, settings=SETTINGS)
        self.storage = OrmStorage()
        self.engine = Engine(self.storage, self.engine.registry, self.engine.settings)
