"""The sweep's last run: whether beat is running, and what the sweep last found."""

from __future__ import annotations

from django.db import models

__all__ = ["SweepRun"]


class SweepRun(models.Model):
    """One row, written at the end of every sweep (``durableflow.operations.sweep``).

    ``finished_at`` is the database's clock, so its age read against the same clock answers "is
    beat running?" whatever the machines' clocks say. Several beats sweeping at once write the
    same row one after the other (a plain UPDATE): the last one wins, which is what it is for.
    """

    name = models.CharField(primary_key=True, max_length=32)
    finished_at = models.DateTimeField()
    seconds = models.FloatField(default=0)  # how long it took
    counts = models.JSONField(default=dict)  # what it returned (due, stale, deadlines...)
    runs = models.PositiveBigIntegerField(default=0)  # sweeps recorded since the row was made

    def __str__(self) -> str:
        return f"{self.name} at {self.finished_at}"
