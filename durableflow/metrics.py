"""Metrics: executions by status and the sweep's backlog, through one function, and a collector
for ``prometheus_client`` (no HTTP server of our own: expose it the way the project already does).

``snapshot()`` reads two aggregate queries and the sweep's row (``durableflow.monitoring``),
judged by the database's clock; call it from whatever scrapes or pushes metrics. With the
``prometheus_client`` package installed, register the collector once per process::

    from prometheus_client import REGISTRY
    from durableflow.metrics import Collector

    REGISTRY.register(Collector())

Each scrape then runs ``snapshot()``: scrape one process (the web app, say), not every worker,
as the numbers are the database's, the same from everywhere.
"""

from __future__ import annotations

from typing import Any, Iterator

from durableflow import monitoring

__all__ = ["snapshot", "Collector"]


def snapshot() -> dict[str, Any]:
    """``executions``: how many in each status (every status named); ``backlog``: how many unfinished
    ones are due, overdue (due longer than a sweep interval), under an expired lease, stale (nobody
    on them and their wake-up older than a lease), past their deadline, stalled; ``sweep``: the age of
    its last run in seconds (None if it never ran) and how long that run took."""
    now = monitoring.database_now()
    last = monitoring.last_sweep(now)
    return {
        "executions": monitoring.counts(),
        "backlog": monitoring.backlog(now),
        "sweep": {
            "last_run_age_seconds": None if last is None else last["age_seconds"],
            "last_run_seconds": None if last is None else last["seconds"],
        },
    }


class Collector:
    """A ``prometheus_client`` collector of ``snapshot()``: the gauges ``durableflow_executions``
    (label ``status``), ``durableflow_backlog`` (label ``kind``), ``durableflow_sweep_age_seconds``
    and ``durableflow_sweep_duration_seconds`` (both absent until a sweep has run)."""

    def __init__(self) -> None:
        try:
            import prometheus_client  # noqa: F401
        except ImportError as exc:
            raise ImportError(
                "durableflow.metrics.Collector needs the prometheus_client package: pip install prometheus-client"
            ) from exc

    def describe(self) -> Iterator[Any]:
        # Named without reading the database (the registry asks at register time).
        return iter(self._families())

    def collect(self) -> Iterator[Any]:
        metrics = snapshot()
        executions, backlog, age, took = self._families()
        for status, n in metrics["executions"].items():
            executions.add_metric([status], n)
        for kind, n in metrics["backlog"].items():
            backlog.add_metric([kind], n)
        yield executions
        yield backlog
        if metrics["sweep"]["last_run_age_seconds"] is not None:
            age.add_metric([], metrics["sweep"]["last_run_age_seconds"])
            took.add_metric([], metrics["sweep"]["last_run_seconds"])
            yield age
            yield took

    @staticmethod
    def _families() -> tuple[Any, Any, Any, Any]:
        from prometheus_client.core import GaugeMetricFamily

        return (
            GaugeMetricFamily("durableflow_executions", "Executions by status.", labels=["status"]),
            GaugeMetricFamily(
                "durableflow_backlog",
                "Unfinished executions the sweep has to act on, by kind (due, overdue, expired_leases, "
                "stale, past_deadline, stalled).",
                labels=["kind"],
            ),
            GaugeMetricFamily("durableflow_sweep_age_seconds", "Seconds since the sweep last finished."),
            GaugeMetricFamily("durableflow_sweep_duration_seconds", "How long the sweep's last run took."),
        )
