"""Effects: the project's own record of operations in external systems."""

from __future__ import annotations

from django.db import models
from django.db.models.functions import Now

from durableflow.engine.effects import MAX_EFFECT_ID_LENGTH, MAX_OPERATION_LENGTH, EffectStatus
from durableflow.models.executions import Execution

__all__ = ["Effect", "EffectWatch"]


class EffectQuerySet(models.QuerySet):
    def pending(self):
        return self.filter(status=EffectStatus.PENDING)

    def settled(self):
        return self.filter(status=EffectStatus.SETTLED)


class Effect(models.Model):
    """One external operation, named by the caller's effect id, and its outcome once known.

    Shared by every execution that names the same id: a settled effect gives its result to
    all of them without another call.
    """

    id = models.CharField(primary_key=True, max_length=MAX_EFFECT_ID_LENGTH, verbose_name="effect id")
    operation = models.CharField(max_length=MAX_OPERATION_LENGTH)
    input = models.JSONField(null=True, blank=True)
    # SHA-256 of the input's canonical JSON: how a repeated request is compared (the decoded
    # JSON read back from the database may not print the same way).
    input_digest = models.CharField(max_length=64)
    status = models.CharField(
        max_length=16, choices=[(s, s) for s in EffectStatus.choices], default=EffectStatus.PENDING
    )
    result = models.JSONField(null=True, blank=True)
    began_by = models.CharField(max_length=200, help_text="the execution that began it")
    began_step = models.CharField(max_length=255)
    settled_by = models.CharField(max_length=200, null=True, blank=True)
    # The delivery between a lookup/perform and its settle or watch (its execution and lease
    # token). A holder whose lease is gone or expired no longer holds it.
    holder_id = models.CharField(max_length=200, null=True, blank=True)
    holder_token = models.CharField(max_length=32, null=True, blank=True)
    attempts = models.PositiveIntegerField(default=0, help_text="lookups and performs begun, by every execution")
    created_at = models.DateTimeField(db_default=Now())
    updated_at = models.DateTimeField(db_default=Now())
    settled_at = models.DateTimeField(null=True, blank=True)

    objects = EffectQuerySet.as_manager()

    class Meta:
        ordering = ["-created_at"]
        indexes = [
            models.Index(fields=["-created_at"], name="durableflow_effect_latest"),
            models.Index(fields=["status", "-created_at"], name="durableflow_effect_status"),
        ]

    def __str__(self) -> str:
        return f"{self.operation} {self.id} ({self.status})"


class EffectWatch(models.Model):
    """An execution parked on a pending effect: woken when the effect settles."""

    id = models.BigAutoField(primary_key=True)
    effect = models.ForeignKey(Effect, on_delete=models.CASCADE, related_name="watches")
    # No database constraint: the watch is written while the execution's own row is being
    # parked in the same transaction; deletes cascade through the ORM.
    execution = models.ForeignKey(
        Execution, on_delete=models.CASCADE, related_name="effect_watches", db_constraint=False
    )
    step_key = models.CharField(max_length=255)
    created_at = models.DateTimeField(db_default=Now())

    class Meta:
        ordering = ["id"]
        constraints = [
            models.UniqueConstraint(fields=["effect", "execution", "step_key"], name="durableflow_effect_watch_once"),
        ]

    def __str__(self) -> str:
        return f"{self.execution_id} watches {self.effect_id}"
