"""Step and workflow options: frozen dataclasses that validate themselves."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Mapping

import jmespath

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
    """At most ``limit`` units per ``window`` seconds for all steps sharing ``key``, whichever
    worker runs them: ``ctx.step.run(..., rate_limit=RateLimit("mail-api", 10, 1.0))``.

    A step over the limit waits durably (no worker is held) until a unit leaves the window.
    ``key`` is a string, or a function called with the step's arguments that returns one
    (``lambda customer, *_: f"api:{customer}"``: a limit per customer). Steps sharing a key
    should give it the same ``limit`` and ``window``; each admission is counted with the
    ``units`` its step asked for.
    """

    key: str | Callable[..., str]
    limit: int
    window: float
    units: int = 1

    def __post_init__(self) -> None:
        if not callable(self.key) and (not isinstance(self.key, str) or not self.key):
            raise ValueError("key must be a non-empty string or a function of the step's arguments returning one")
        if isinstance(self.key, str) and len(self.key) > MAX_RATE_LIMIT_KEY:
            raise ValueError(f"key must be at most {MAX_RATE_LIMIT_KEY} characters")
        if not _whole(self.limit) or self.limit < 1:
            raise ValueError("limit must be at least 1")
        if isinstance(self.window, bool) or not isinstance(self.window, (int, float)):
            raise ValueError("window must be a number of seconds")
        if not 0 < self.window <= MAX_RATE_LIMIT_WINDOW:  # NaN fails both
            raise ValueError(f"window must be positive, at most {MAX_RATE_LIMIT_WINDOW:,} seconds (a year)")
        if not _whole(self.units) or not 1 <= self.units <= self.limit:
            raise ValueError("units must be between 1 and limit")


MAX_RATE_LIMIT_KEY = 200  # RateLimitAdmission.key
MAX_RATE_LIMIT_WINDOW = 366 * 86_400


def _whole(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


@dataclass(frozen=True)
class Concurrency:
    """At most ``limit`` executions with the same key past their start at once.

    ``key`` is a JMESPath expression over ``{"params": params}`` (``"params.customer"``) or a
    callable of the params; a run whose key is ``None`` is not limited. The others wait,
    ``pending``, and start in start order as the runs holding the key end.
    """

    key: str | Callable[[Any], Any]
    limit: int = 1

    def __post_init__(self) -> None:
        if isinstance(self.key, str):
            if not self.key:
                raise ValueError("key must not be empty")
            try:
                object.__setattr__(self, "_expression", jmespath.compile(self.key))
            except jmespath.exceptions.JMESPathError as exc:
                raise ValueError(f"key {self.key!r} is not a JMESPath expression: {exc}") from None
        elif not callable(self.key):
            raise ValueError("key must be a JMESPath expression (a string) or a callable of the params")
        if isinstance(self.limit, bool) or not isinstance(self.limit, int) or self.limit < 1:
            raise ValueError("limit must be an integer of at least 1")

    def evaluate(self, params: Any) -> Any:
        """The key of a run with ``params``, as the expression or callable gives it."""
        if callable(self.key):
            return self.key(params)
        return self._expression.search({"params": params})  # type: ignore[attr-defined]
