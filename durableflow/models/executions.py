"""Executions and their journals (step records)."""

from __future__ import annotations

from datetime import timedelta

from django.db import models
from django.db.models import Q
from django.db.models.functions import Now

from durableflow.engine import predicates
from durableflow.engine.states import DUE_ONLY, RUNNABLE, STEP_UNFINISHED, TERMINAL, ExecutionStatus, StepStatus
from durableflow.orm.predicates import to_q

__all__ = ["Execution", "StepRecord", "status_in"]

S = ExecutionStatus
# Runnable whenever their lease is free (the others only once due): the sweep re-sends these.
ACTIVE = sorted(RUNNABLE - DUE_ONLY)


def status_in(statuses) -> Q:
    """``status`` is one of ``statuses`` (``=`` for one, so a partial index on it matches as written)."""
    statuses = sorted(statuses)
    return Q(status=statuses[0]) if len(statuses) == 1 else Q(status__in=statuses)


class ExecutionQuerySet(models.QuerySet):
    def finished(self):
        return self.filter(status__in=TERMINAL)

    def unfinished(self):
        return self.filter(status__in=RUNNABLE)

    def due(self, now=None):
        """Waiting executions whose timer, retry or timeout is due (``now``: the database clock)."""
        return self.filter(due(now))

    def stale(self, redeliver_after: float, now=None):
        """Runnable but nobody is on it: its lease expired, or its wake-up message is overdue."""
        return self.filter(stale(redeliver_after, now))


def due(now=None) -> Q:
    """``ExecutionQuerySet.due``'s condition (also counted by ``durableflow.monitoring``)."""
    return to_q(predicates.DUE, now)


def stale(redeliver_after: float, now=None) -> Q:
    """``ExecutionQuerySet.stale``'s condition (also counted by ``durableflow.monitoring``)."""
    return to_q(predicates.STALE, now, {"redeliver_after": redeliver_after})


class Execution(models.Model):
    """One run of a workflow: its params, status and outcome, and the lease of its delivery."""

    id = models.CharField(primary_key=True, max_length=200)
    workflow = models.CharField(max_length=200)
    version = models.CharField(max_length=64, default="1")
    status = models.CharField(max_length=24, choices=[(s, s.replace("_", " ")) for s in S.choices], default=S.PENDING)
    params = models.JSONField(null=True, blank=True)
    result = models.JSONField(null=True, blank=True)
    error = models.JSONField(null=True, blank=True)
    idempotency_key = models.CharField(max_length=200, null=True, blank=True)
    queue = models.CharField(max_length=200)
    parent = models.ForeignKey("self", null=True, blank=True, on_delete=models.SET_NULL, related_name="children")
    root_id = models.CharField(max_length=200, db_index=True)
    metadata = models.JSONField(default=dict, blank=True)
    # What a waiting execution waits for ({"kind": "timer", "step": ..., "until": ...}),
    # and when it is due (a timer, a retry, a wait's timeout). Both read by the sweep.
    waiting_for = models.JSONField(null=True, blank=True)
    wake_at = models.DateTimeField(null=True, blank=True)
    deadline_at = models.DateTimeField(null=True, blank=True)
    # A wait registered on this execution's end (wait_for_execution): its outcome wakes them.
    watched = models.BooleanField(default=False)
    # A wake-up arrived while a delivery held the lease: its suspension becomes a replay at once.
    wake_pending = models.BooleanField(default=False)
    # ctx.continue_as_new(): the execution that carries this one on (results are read there).
    continued_as = models.CharField(max_length=200, null=True, blank=True)
    # Sagas (durableflow.engine.sagas). A compensable step is about to run or has run: a cancel
    # must then replay the run to compensate it (set, fenced, before the step's body runs).
    compensable = models.BooleanField(default=False)
    # cancel() accepted while compensations must still run: the error the run will end with.
    # Its next delivery stops at the first unfinished step, compensates and ends cancelled.
    cancel_requested = models.JSONField(null=True, blank=True)
    # The compensations that ran, last-completed-first: step, status, error, duration, times.
    compensations = models.JSONField(null=True, blank=True)
    # rerun() / fork(): the execution this one was made from, how, and (fork) from which step.
    origin_id = models.CharField(max_length=200, null=True, blank=True)
    origin_kind = models.CharField(max_length=16, null=True, blank=True)
    origin_step = models.CharField(max_length=255, null=True, blank=True)
    # What seeds ctx.random() and ctx.uuid() (None: the id): a fork keeps its origin's, so that
    # the journal it kept replays the same draws.
    seed = models.CharField(max_length=200, null=True, blank=True)
    # The lease of the delivery running it. Every journal write is fenced by the token. The
    # holder ("<host> <pid> <start time>", durableflow.engine.holders) is the process that
    # claimed it, meaningful while the token is set: a holder gone from this host is taken over.
    lease_token = models.CharField(max_length=32, null=True, blank=True)
    lease_expires_at = models.DateTimeField(null=True, blank=True)
    lease_holder = models.CharField(max_length=255, null=True, blank=True)
    enqueued_at = models.DateTimeField(db_default=Now())
    deliveries = models.PositiveIntegerField(default=0)
    # Deliveries in a row whose claim found the previous one's lease still set: that delivery's
    # process died holding it (killed, out of memory, a crash in native code). Zeroed by a claim
    # that finds the lease given back (an outcome, a suspension, a fault's release).
    lost_deliveries = models.PositiveIntegerField(default=0)
    # The span context of the start, as OpenTelemetry's propagator wrote it (``traceparent``...),
    # when a tracer provider was configured: each delivery's span is its child.
    trace_context = models.JSONField(null=True, blank=True, editable=False)
    # A workflow with a concurrency limit: the run's key (None: not limited), and while it waits
    # for a slot its ticket in the key's queue, lower first (pending, never claimed nor re-sent
    # until a holder ends and admits it; None: it holds a slot, or is not limited).
    concurrency_key = models.CharField(max_length=255, null=True, blank=True)
    concurrency_ticket = models.PositiveBigIntegerField(null=True, blank=True)
    created_at = models.DateTimeField(db_default=Now())
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    objects = ExecutionQuerySet.as_manager()

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [
            models.Index(fields=["-created_at", "-id"], name="durableflow_exec_latest"),
            # Each list filter with the list's whole ordering, "-id" included: a page is read
            # straight off the index, whatever the table's size (no sort of the matches).
            models.Index(fields=["status", "-created_at", "-id"], name="durableflow_exec_status"),
            models.Index(fields=["workflow", "-created_at", "-id"], name="durableflow_exec_workflow"),
            models.Index(fields=["workflow", "status", "-created_at", "-id"], name="durableflow_exec_wf_status"),
            # The admin's search by idempotency key (an exact match; most executions have none).
            models.Index(
                fields=["idempotency_key"], condition=Q(idempotency_key__isnull=False), name="durableflow_exec_idem"
            ),
            # The sweep's two questions, over unfinished rows only: the index stays as small
            # as the set of live executions however long the history grows.
            models.Index(fields=["wake_at"], condition=status_in(DUE_ONLY), name="durableflow_exec_due"),
            models.Index(
                fields=["enqueued_at"],
                condition=status_in(ACTIVE),
                name="durableflow_exec_active",
            ),
            # The sweep's third: unfinished runs with a deadline (most have none).
            models.Index(
                fields=["deadline_at"],
                condition=Q(deadline_at__isnull=False) & status_in(RUNNABLE),
                name="durableflow_exec_deadline",
            ),
            # A concurrency key's holders and queue: the runs of one key that are not finished.
            models.Index(
                fields=["workflow", "concurrency_key", "concurrency_ticket"],
                condition=Q(concurrency_key__isnull=False) & status_in(RUNNABLE),
                name="durableflow_exec_slots",
            ),
            # An execution's reruns and forks, and its children, newest first (the admin's
            # panels, the API's links). The ordering is in the index: without it SQLite walks the
            # whole "latest" index for the order and filters every row.
            models.Index(
                fields=["origin_id", "-created_at", "-id"],
                condition=Q(origin_id__isnull=False),
                name="durableflow_exec_origin_latest",
            ),
            models.Index(
                fields=["parent_id", "-created_at", "-id"],
                condition=Q(parent_id__isnull=False),
                name="durableflow_exec_children",
            ),
        ]
        constraints = [
            models.UniqueConstraint(
                fields=["workflow", "idempotency_key"],
                condition=Q(idempotency_key__isnull=False),
                name="durableflow_idempotent_start",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.workflow} {self.id} ({self.status})"

    @property
    def is_finished(self) -> bool:
        return self.status in TERMINAL


class StepRecord(models.Model):
    """One journal entry: the outcome (or the progress) of one step key of one execution."""

    id = models.BigAutoField(primary_key=True)
    # No database-level constraint: every insert is fenced by a lookup of the execution's
    # lease (durableflow.orm.sql), which already proves the execution exists; a constraint would
    # look it up again and lock its row on every step. Deletes cascade through the ORM.
    execution = models.ForeignKey(
        Execution, on_delete=models.CASCADE, related_name="steps", db_index=False, db_constraint=False
    )
    key = models.CharField(max_length=255)
    kind = models.CharField(max_length=32)
    status = models.CharField(max_length=16, choices=[(s, s) for s in StepStatus.choices])
    attempts = models.PositiveIntegerField(default=0)
    value = models.JSONField(null=True, blank=True)
    error = models.JSONField(null=True, blank=True)
    meta = models.JSONField(default=dict, blank=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["id"]
        indexes = [
            # The journal in recorded order, a page at a time from any position (the REST
            # journal's key set): the unique (execution, key) index cannot give that order.
            models.Index(fields=["execution", "id"], name="durableflow_step_journal"),
            # Step bodies out as their own tasks (map items, run(queue=)) that are not done: the
            # sweep re-sends those whose message or worker was lost. Only those rows are indexed.
            models.Index(
                fields=["started_at"],
                condition=Q(kind="item", status__in=sorted(STEP_UNFINISHED)),
                name="durableflow_step_items",
            ),
        ]
        constraints = [
            # A step is recorded once: a second writer gets a conflict, never a second row.
            models.UniqueConstraint(fields=["execution", "key"], name="durableflow_step_once"),
        ]

    def __str__(self) -> str:
        return f"{self.key} ({self.kind}, {self.status})"

    @property
    def duration(self) -> timedelta | None:
        if self.started_at and self.finished_at:
            return self.finished_at - self.started_at
        return None
