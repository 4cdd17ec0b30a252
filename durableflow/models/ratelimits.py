"""Rate limits: the admissions a shared limiter counted, and the requests still waiting."""

from __future__ import annotations

from django.db import models

from durableflow.models.executions import Execution

__all__ = ["RateLimitAdmission"]


class RateLimitAdmission(models.Model):
    """One step's request for ``units`` of a rate limit's ``key`` (``ctx.step.run(rate_limit=)``).

    Admitted (``admitted_at`` set) or still waiting, in request order (``requested_at``). The
    admissions of a key in the last ``window`` seconds are what its limiter counts, whichever
    worker asks; one row per (execution, step key), so a replay or a retry of the body finds
    its admission and takes no second unit. Kept when its execution is pruned (the link is
    cleared) until ``expires_at``, when it leaves its window: then the prune deletes it.
    """

    id = models.BigAutoField(primary_key=True)
    key = models.CharField(max_length=200)
    # No database constraint, as for step records: the row is written by the delivery that holds
    # the execution's lease (checked in the same transaction).
    execution = models.ForeignKey(
        Execution,
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="admissions",
        db_index=False,
        db_constraint=False,
    )
    step_key = models.CharField(max_length=255)
    units = models.PositiveIntegerField(default=1)
    requested_at = models.DateTimeField()
    admitted_at = models.DateTimeField(null=True, blank=True)
    expires_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-id"]
        indexes = [
            # The limiter's questions: a key's admissions in the window, its requests still waiting.
            models.Index(fields=["key", "admitted_at"], name="durableflow_admission_key"),
        ]
        constraints = [
            models.UniqueConstraint(fields=["execution", "step_key"], name="durableflow_admission_once"),
        ]

    def __str__(self) -> str:
        state = f"admitted {self.admitted_at:%Y-%m-%d %H:%M:%S}" if self.admitted_at else "waiting"
        return f"{self.key}: {self.units} for {self.execution_id}:{self.step_key} ({state})"
