"""Small statistics helpers shared by the benchmark modules."""

from __future__ import annotations

import statistics
import time
from typing import Callable, Iterable


def percentile(samples: Iterable[float], q: float) -> float:
    ordered = sorted(samples)
    if not ordered:
        return float("nan")
    index = min(len(ordered) - 1, max(0, round(q / 100 * (len(ordered) - 1))))
    return ordered[index]


def summary(samples: list[float]) -> dict[str, float]:
    return {"p50": percentile(samples, 50), "p99": percentile(samples, 99), "n": len(samples)}


def median(samples: Iterable[float]) -> float:
    values = list(samples)
    return statistics.median(values) if values else float("nan")


def spread(samples: list[float]) -> dict[str, float]:
    """Median and the relative spread (max - min) / median of per-round values."""
    mid = median(samples)
    return {
        "median": mid,
        "min": min(samples),
        "max": max(samples),
        "spread_pct": 100 * (max(samples) - min(samples)) / mid if mid else float("nan"),
        "rounds": len(samples),
    }


def timed_ms(fn: Callable[[], object]) -> float:
    started = time.perf_counter()
    fn()
    return (time.perf_counter() - started) * 1000


def per_step(runs: dict[str, dict]) -> dict[str, float]:
    """The marginal cost of one step: ``{size: {"ms": [...], "queries": n}}`` between the
    smallest and the largest size (what a delivery costs beyond its fixed part)."""
    sizes = sorted(int(size) for size in runs)
    small, large = runs[str(sizes[0])], runs[str(sizes[-1])]
    span = sizes[-1] - sizes[0]
    return {
        "ms_per_step": (median(large["ms"]) - median(small["ms"])) / span,
        "queries_per_step": (large["queries"] - small["queries"]) / span,
    }
