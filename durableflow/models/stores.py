"""Durable stores: shared state (``Store``), the ledger of the steps that changed it, and the
executions waiting for it to change."""

from __future__ import annotations

from django.db import models
from django.db.models import Q
from django.db.models.functions import Now

from durableflow.models.executions import Execution

__all__ = ["Store", "StoreLedger", "StoreWaiter"]


class Store(models.Model):
    """One store: a durable value shared by executions, views and the admin.

    ``store_id`` is the store's id within its definition (``ctx.step.store(Cart, id="cart-42")``);
    ``version`` moves on by one with every committed change (0 when created from ``initial``);
    ``instance_id`` is new whenever the store is deleted and created again, so a snapshot of
    the old instance never matches the new one.
    """

    id = models.BigAutoField(primary_key=True)
    name = models.CharField(max_length=200)
    store_id = models.CharField(max_length=200)
    instance_id = models.CharField(max_length=32)
    version = models.PositiveBigIntegerField(default=0)
    state = models.JSONField(null=True, blank=True)
    # Set when a waiter registers, cleared by a change that leaves none unwoken: a change of a
    # store nobody waits for does not look for waiters. Only ever True too often, never False.
    has_waiters = models.BooleanField(default=False)
    created_at = models.DateTimeField(db_default=Now())
    updated_at = models.DateTimeField(db_default=Now())

    class Meta:
        ordering = ["name", "store_id"]
        constraints = [models.UniqueConstraint(fields=["name", "store_id"], name="durableflow_store_once")]

    def __str__(self) -> str:
        return f"{self.name}/{self.store_id} (v{self.version})"


class StoreLedger(models.Model):
    """A workflow step that changed a store, with the outcome it returned.

    Written in the store's transaction, so a step that replays after the store committed but
    before its journal record was written finds its outcome here instead of changing the
    store again: one entry per (execution, step key), ever. It is also the store's history.
    """

    id = models.BigAutoField(primary_key=True)
    execution_id = models.CharField(max_length=200)
    key = models.CharField(max_length=255)
    kind = models.CharField(max_length=32)
    name = models.CharField(max_length=200)
    store_id = models.CharField(max_length=200)
    instance_id = models.CharField(max_length=32)
    # The version the change produced (for a delete, the last version of the instance).
    version = models.PositiveBigIntegerField()
    outcome = models.JSONField(null=True, blank=True)
    applied_at = models.DateTimeField(db_default=Now())

    class Meta:
        ordering = ["id"]
        constraints = [models.UniqueConstraint(fields=["execution_id", "key"], name="durableflow_store_applied_once")]
        indexes = [models.Index(fields=["name", "store_id", "version"], name="durableflow_ledger_store")]

    def __str__(self) -> str:
        return f"{self.execution_id}:{self.key} -> {self.name}/{self.store_id} v{self.version}"


class StoreWaiter(models.Model):
    """A ``when``/``take`` step waiting for a store: what its selector read, at which version.

    A committed change wakes it (sets ``woken_at`` and wakes the execution) only if one of
    ``reads`` differs between the old and the new state, or the instance was replaced.
    """

    id = models.BigAutoField(primary_key=True)
    # No database constraint, as for step records: the waiter is written by the delivery that
    # holds the execution; deletes cascade through the ORM.
    execution = models.ForeignKey(
        Execution, on_delete=models.CASCADE, related_name="store_waiters", db_index=False, db_constraint=False
    )
    key = models.CharField(max_length=255)
    name = models.CharField(max_length=200)
    store_id = models.CharField(max_length=200)
    instance_id = models.CharField(max_length=32)
    version = models.PositiveBigIntegerField()
    # [{"path": ["items", 0], "read": "value" | "shape" | "type"}, ...]
    reads = models.JSONField(default=list, blank=True)
    created_at = models.DateTimeField(db_default=Now())
    woken_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["id"]
        constraints = [models.UniqueConstraint(fields=["execution", "key"], name="durableflow_store_waiter_once")]
        indexes = [
            models.Index(
                fields=["name", "store_id"], condition=Q(woken_at__isnull=True), name="durableflow_waiter_store"
            ),
            models.Index(fields=["woken_at"], condition=Q(woken_at__isnull=False), name="durableflow_waiter_woken"),
        ]

    def __str__(self) -> str:
        return f"{self.execution_id}:{self.key} waits for {self.name}/{self.store_id}"
