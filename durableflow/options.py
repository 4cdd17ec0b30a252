"""Step and workflow options: frozen dataclasses that validate themselves."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

__all__ = ["Retry", "RateLimit", "Concurrency"]


@dataclass(frozen=True)
class Retry:
    """How often a failing step is attempted, and how long it waits in between.

    The wait after attempt ``n`` is ``interval * backoff ** (n - 1)``, capped by
    ``max_interval``. The execution sleeps durably meanwhile; no worker is held.
    """

    max_attempts: int = 3
    interval: float = 1.0
    backoff: float = 2.0
    max_interval: float | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.max_attempts, int) or self.max_attempts < 1:
            raise ValueError("max_attempts must be at least 1")
        if self.interval < 0:
            raise ValueError("interval must not be negative")
        if self.backoff < 1:
            raise ValueError("backoff must be at least 1")
        if self.max_interval is not None and self.max_interval < 0:
            raise ValueError("max_interval must not be negative")

    def delay(self, attempt: int) -> float:
        """Seconds to wait after the failed attempt number ``attempt`` (1-based)."""
        delay = self.interval * self.backoff ** max(attempt - 1, 0)
        return min(delay, self.max_interval) if self.max_interval is not None else delay

    @classmethod
    def from_setting(cls, value: Retry | Mapping[str, Any] | None) -> Retry:
        if value is None:
            return cls(max_attempts=1)
        if isinstance(value, Retry):
            return value
        return cls(**value)


@dataclass(frozen=True)
class RateLimit:
    """At most ``limit`` units per ``window`` seconds for all steps sharing ``key``."""

    key: str
    limit: int
    window: float
    units: int = 1

    def __post_init__(self) -> None:
        if not self.key:
            raise ValueError("key must not be empty")
        if self.limit < 1:
            raise ValueError("limit must be at least 1")
        if self.window <= 0:
            raise ValueError("window must be positive")
        if not 1 <= self.units <= self.limit:
            raise ValueError("units must be between 1 and limit")


@dataclass(frozen=True)
class Concurrency:
    """At most ``limit`` executions with the same key (a path into the params) at once."""

    key: str
    limit: int = 1

    def __post_init__(self) -> None:
        if not self.key:
            raise ValueError("key must not be empty")
        if self.limit < 1:
            raise ValueError("limit must be at least 1")
