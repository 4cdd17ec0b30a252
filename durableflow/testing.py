"""Test your workflows without a database, a broker or a worker.

    from durableflow.testing import WorkflowTester

    def test_fulfil():
        tester = WorkflowTester()
        execution = tester.start("order-fulfilment", {"order_id": 7})
        assert tester.run_until_finished(execution.id) == {"receipt": ...}
        assert [r.key for r in tester.records(execution.id)] == ["load-order", "cool-off", ...]

Timers and retries fire at once: ``run_until_finished`` moves the tester's clock to the next
due time whenever nothing else is runnable. The engine is the one the workers run; only
the journal is kept in memory.
"""

from __future__ import annotations

from typing import Any

from durableflow import exceptions
from durableflow.engine.journal import TERMINAL, ExecutionStatus
from durableflow.engine.memory import InMemoryBackend, InMemoryJournal, ManualClock

__all__ = ["WorkflowTester", "InMemoryBackend", "InMemoryJournal", "ManualClock"]


class WorkflowTester(InMemoryBackend):
    """An in-memory backend with helpers to drive executions to their end."""

    def run_until_finished(self, execution_id: str, *, max_deliveries: int = 10_000) -> Any:
        """Deliver (moving the clock over timers) until the execution ends; return its result."""
        for _ in range(max_deliveries):
            execution = self.get(execution_id)
            if execution.status in TERMINAL:
                return self.result(execution_id)
            if self.runnable():
                self.run(max_deliveries=max_deliveries)
                continue
            due = [e.wake_at for e in self.executions.values() if e.status == ExecutionStatus.WAITING and e.wake_at]
            if not due:
                raise exceptions.WaitTimeout(
                    message=f"execution {execution_id} waits for something no timer will bring: {execution.waiting_for}"
                )
            self.advance(max(0.0, (min(due) - self.clock()).total_seconds()))
        raise RuntimeError(f"execution {execution_id} did not finish in {max_deliveries} deliveries")

    def result(self, execution_id: str) -> Any:
        """The result of a completed execution; ``ExecutionFailed`` if it ended otherwise."""
        execution = self.get(execution_id)
        if execution.status == ExecutionStatus.COMPLETED:
            return execution.result
        if execution.status in TERMINAL:
            raise exceptions.ExecutionFailed(
                message=f"execution {execution_id} is {execution.status}",
                status=execution.status,
                error=execution.error,
            )
        raise exceptions.WaitTimeout(message=f"execution {execution_id} is still {execution.status}")

    def step_values(self, execution_id: str) -> dict[str, Any]:
        return {record.key: record.value for record in self.records(execution_id)}
