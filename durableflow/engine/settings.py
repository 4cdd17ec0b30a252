"""The settings the engine reads, as one frozen value (Django's face builds it from DURABLEFLOW)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

from durableflow.engine.holders import Holders, local
from durableflow.options import Retry

__all__ = ["EngineSettings"]


@dataclass(frozen=True)
class EngineSettings:
    default_retry: Retry = field(default_factory=lambda: Retry(max_attempts=1))
    max_payload_bytes: int = 1_000_000
    default_queue: str = "durableflow"
    lease_seconds: float = 60
    sweep_batch_size: int = 500
    # A run whose deliveries died holding the lease more often than this in a row is failed
    # (DELIVERY_LOST) instead of delivered again: its code kills the process that runs it.
    max_lost_deliveries: int = 10
    # Called at the end of a helper thread that ran a step body with ``timeout=`` off the
    # main thread (Django's face closes that thread's database connections).
    on_thread_exit: Callable[[], None] | None = None
    # This process as a lease holder, and how it sees the other processes of its machine
    # (``durableflow.engine.holders``; tests give their own). None: this process, when asked.
    holders: Holders | None = None
    # ``(kind, key, fn) -> callable``: what a step body is called as ("run", "transaction" or
    # "effect" and the step's key). None: the body itself. ``WorkflowTester(steps=...)`` gives
    # its fixtures, and counts the bodies that really run, through it.
    step_body: Callable[[str, str, Callable[..., Any]], Callable[..., Any]] | None = None

    def lease_holders(self) -> Holders:
        return self.holders if self.holders is not None else local()
