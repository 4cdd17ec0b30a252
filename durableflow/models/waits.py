"""Waits: what a waiting execution waits for (``Waiter``) and what satisfies it (``Event``).

An ``Event`` row is anything published to waits: a broadcast event (matched by type and
payload), a signal (addressed to one execution) or a token completion. A ``Waiter`` row is
one wait step of one execution; once satisfied it names the event it consumed, and a unique
constraint lets each event satisfy at most one wait of an execution.
"""

from __future__ import annotations

from django.db import models
from django.db.models import Q
from django.db.models.functions import Now

from durableflow.engine.states import WaiterStatus
from durableflow.models.executions import Execution

__all__ = ["Event", "Waiter"]

W = WaiterStatus


class Event(models.Model):
    """A published event, a signal sent to one execution, or a token's completion."""

    KINDS = [("event", "event"), ("signal", "signal"), ("token", "token")]

    id = models.BigAutoField(primary_key=True)  # publication order: earliest waits take earliest events
    kind = models.CharField(max_length=16, choices=KINDS, default="event")
    # The event type, the signal name or the token.
    name = models.CharField(max_length=500)
    # Idempotency: one row per (kind, event_id); a token's event_id is the token itself.
    event_id = models.CharField(max_length=500)
    # The addressee of a signal (and the owner of a token, where known).
    execution = models.ForeignKey(
        Execution, null=True, blank=True, on_delete=models.CASCADE, related_name="signals"
    )
    payload = models.JSONField(null=True, blank=True)
    created_at = models.DateTimeField(db_default=Now())

    class Meta:
        ordering = ["-id"]
        indexes = [
            # A wait looks up the events of its type (or name) published since its execution
            # started: a range of this index however long the history of that type.
            models.Index(fields=["kind", "name", "created_at"], name="durableflow_event_name"),
        ]
        constraints = [
            models.UniqueConstraint(fields=["kind", "event_id"], name="durableflow_event_once"),
        ]

    def __str__(self) -> str:
        return f"{self.kind} {self.name} ({self.event_id})"


class Waiter(models.Model):
    """One wait step of one execution: what it waits for, since when and until when."""

    KINDS = [("event", "event"), ("signal", "signal"), ("token", "token"), ("child", "child")]

    id = models.BigAutoField(primary_key=True)
    execution = models.ForeignKey(Execution, on_delete=models.CASCADE, related_name="waiters")
    key = models.CharField(max_length=255)
    kind = models.CharField(max_length=16, choices=KINDS)
    # The event type, signal name, token, or the id of the execution waited for.
    target = models.CharField(max_length=500)
    match = models.JSONField(null=True, blank=True)
    status = models.CharField(max_length=16, choices=[(s, s) for s in W.choices], default=W.OPEN)
    # The event that satisfied it (events, signals, tokens).
    event = models.ForeignKey(Event, null=True, blank=True, on_delete=models.SET_NULL, related_name="consumers")
    # Whoever satisfies it may complete its step's record (a publisher, a child that completed),
    # so that the woken delivery replays it instead of reading the waiter and the event.
    settles = models.BooleanField(default=False, db_default=False)
    created_at = models.DateTimeField(db_default=Now())
    deadline_at = models.DateTimeField(null=True, blank=True)
    resolved_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["id"]
        indexes = [
            # A publisher looks up the open waits for what it publishes; resolved ones leave the index.
            models.Index(fields=["kind", "target"], condition=Q(status=W.OPEN), name="durableflow_waiter_open"),
        ]
        constraints = [
            models.UniqueConstraint(fields=["execution", "key"], name="durableflow_waiter_once"),
            # Each event satisfies at most one wait of an execution, whoever assigns it.
            models.UniqueConstraint(
                fields=["execution", "event"], condition=Q(event__isnull=False), name="durableflow_event_consumed_once"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.execution_id} {self.key}: {self.kind} {self.target} ({self.status})"
