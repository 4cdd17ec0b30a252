"""What an operator asks of the database: how many runs in each status, which are late, is beat running.

``status()`` is the whole report (``manage.py durableflow status``); ``counts()`` and
``backlog()`` are its cheap parts, what ``durableflow.metrics`` exposes. Every age is judged by
the database's clock, as the sweep judges it, so a worker's clock does not matter. Reads
only: each is one aggregate query over the executions (the backlog's over unfinished rows, on
the sweep's partial indexes).
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Any

from django.db import DatabaseError, IntegrityError, transaction
from django.db.models import Count, F, Q
from django.db.models.functions import Now

from durableflow.conf import df_settings
from durableflow.engine import logs, predicates
from durableflow.engine.states import RUNNABLE, ExecutionStatus
from durableflow.models import Execution, SweepRun, executions
from durableflow.orm import OrmStorage, db_alias
from durableflow.orm.predicates import to_q

__all__ = [
    "counts",
    "backlog",
    "by_workflow",
    "oldest",
    "status",
    "render",
    "as_json",
    "record_sweep",
    "last_sweep",
    "database_now",
]

logger = logs.logger("durableflow.sweep")

SWEEP = "sweep"  # the name of the sweep's row
OLDEST = 5  # executions listed per question

# The questions about unfinished runs, each a filter at the database time ``now``.
_STALLED = Q(status=ExecutionStatus.WAITING, waiting_for__kind="stalled")


def _questions(now: datetime) -> dict[str, Q]:
    late = now - timedelta(seconds=df_settings.SWEEP_INTERVAL)
    return {
        # Due, not yet woken by the sweep (it wakes them within one interval).
        "due": executions.due(now),
        # Due for longer than a sweep interval: the sweep is not running, or not keeping up.
        "overdue": executions.due(late),
        # Held by a delivery whose lease ran out (its worker died or hangs): re-sent by the sweep.
        "expired_leases": to_q(predicates.LEASE_EXPIRED, now),
        # Runnable, nobody on it, and its last wake-up older than a lease: the sweep re-sends these.
        "stale": executions.stale(df_settings.LEASE_SECONDS, now),
        # Past their deadline and not cancelled yet (the sweep cancels them).
        "past_deadline": to_q(predicates.OVERDUE, now),
        # Code that does not match the journal: waiting for a deploy, a retry() or a cancel.
        "stalled": _STALLED,
    }


def _executions():
    return Execution.objects.using(db_alias())


def database_now() -> datetime:
    """The database's clock (what every age here is judged by)."""
    return OrmStorage().now()


def counts() -> dict[str, int]:
    """Executions by status, every status named (0 included)."""
    found = dict(_executions().order_by().values_list("status").annotate(n=Count("pk")))
    return {status: found.get(status, 0) for status in ExecutionStatus.choices}


def backlog(now: datetime | None = None) -> dict[str, int]:
    """How many unfinished executions answer each question of the sweep's backlog (see ``_questions``)."""
    questions = _questions(now or database_now())
    aggregates = {name: Count("pk", filter=question) for name, question in questions.items()}
    return _executions().filter(status__in=RUNNABLE).aggregate(**aggregates)


def by_workflow() -> dict[str, dict[str, int]]:
    """Executions by workflow, then status (only the statuses it has)."""
    table: dict[str, dict[str, int]] = {}
    rows = _executions().order_by().values_list("workflow", "status").annotate(n=Count("pk"))
    for workflow, status, n in rows.order_by("workflow", "status"):
        table.setdefault(workflow, {})[status] = n
    return table


def oldest(question: str, now: datetime, limit: int = OLDEST) -> list[dict[str, Any]]:
    """The oldest executions that answer ``question`` (created first), with what tells why they are listed."""
    rows = _executions().filter(_questions(now)[question]).order_by("created_at", "id")[:limit]
    return [_row(execution, now) for execution in rows]


def _row(execution: Execution, now: datetime) -> dict[str, Any]:
    row: dict[str, Any] = {
        "id": execution.id,
        "workflow": execution.workflow,
        "status": execution.status,
        "created_at": execution.created_at,
        "age_seconds": _seconds(now - execution.created_at),
    }
    for name in ("wake_at", "lease_expires_at", "deadline_at"):
        if getattr(execution, name) is not None:
            row[name] = getattr(execution, name)
    if execution.waiting_for:
        row["waiting_for"] = execution.waiting_for.get("kind")
    if execution.lease_holder and execution.lease_token:
        row["lease_holder"] = execution.lease_holder
    return row


def _seconds(delta: timedelta) -> float:
    return round(delta.total_seconds(), 3)


def record_sweep(counts: dict[str, int], seconds: float) -> None:
    """Write the sweep's row (``SweepRun``): when it last finished, how long it took, what it found.

    One UPDATE per sweep; the first one makes the row. A failure is logged, never raised: the
    sweep's own work is committed already.
    """
    alias = db_alias()
    rows = SweepRun.objects.using(alias)
    fields = {"finished_at": Now(), "seconds": round(seconds, 6), "counts": counts}  # the database's clock
    try:
        if rows.filter(pk=SWEEP).update(runs=F("runs") + 1, **fields):
            return
        try:
            with transaction.atomic(using=alias):
                rows.create(name=SWEEP, runs=1, **fields)
        except IntegrityError:  # another beat's sweep made it first
            rows.filter(pk=SWEEP).update(runs=F("runs") + 1, **fields)
    except DatabaseError as exc:
        logger.warning("the sweep's run could not be recorded: %s", exc)


def last_sweep(now: datetime | None = None) -> dict[str, Any] | None:
    """The sweep's last run: ``finished_at``, ``age_seconds`` (by the database's clock), ``seconds``,
    ``counts``, ``runs``; None if no sweep ever ran on this database."""
    run = SweepRun.objects.using(db_alias()).filter(pk=SWEEP).first()
    if run is None:
        return None
    return {
        "finished_at": run.finished_at,
        "age_seconds": _seconds((now or database_now()) - run.finished_at),
        "seconds": run.seconds,
        "counts": run.counts,
        "runs": run.runs,
    }


def status(limit: int = OLDEST) -> dict[str, Any]:
    """The whole report: counts by status and by workflow, the sweep's backlog with the oldest
    executions of each question, and the sweep's last run (``beat``: whether it ran within a
    few sweep intervals)."""
    now = database_now()
    sweep = last_sweep(now)
    interval = df_settings.SWEEP_INTERVAL
    # A sweep finished within three intervals (and a second, for a busy machine): beat runs it.
    beat = sweep is not None and sweep["age_seconds"] <= 3 * interval + 1  # the bound _sweep_line prints
    questions = backlog(now)
    return {
        "now": now,
        "counts": counts(),
        "workflows": by_workflow(),
        "backlog": questions,
        "oldest": _oldest(now, questions, limit),
        "sweep": {"interval_seconds": interval, "last_run": sweep, "beat_running": beat},
    }


def _oldest(now: datetime, questions: dict[str, int], limit: int) -> dict[str, list[dict[str, Any]]]:
    waiting = _executions().filter(status=ExecutionStatus.WAITING).order_by("created_at", "id")[:limit]
    listed = {"waiting": [_row(execution, now) for execution in waiting]}
    for name in ("overdue", "expired_leases", "past_deadline", "stalled"):
        listed[name] = oldest(name, now, limit) if questions[name] else []
    return listed


_TITLES = {
    "waiting": "Oldest waiting",
    "overdue": "Overdue (due more than a sweep interval ago)",
    "expired_leases": "Expired leases",
    "past_deadline": "Past their deadline, not cancelled yet",
    "stalled": "Stalled (code that does not match the journal)",
}


def render(report: dict[str, Any]) -> str:
    """The report as one screen of text (``manage.py durableflow status``)."""
    lines = [f"durableflow status at {_when(report['now'])} (the database's clock)", "", "Executions by status"]
    total = sum(report["counts"].values())
    width = max(len(status) for status in report["counts"])
    lines += [f"  {status:<{width}}  {n:>8}" for status, n in report["counts"].items()]
    lines += [f"  {'total':<{width}}  {total:>8}", ""]
    if report["workflows"]:
        lines.append("By workflow")
        for workflow, by_status in report["workflows"].items():
            lines.append(f"  {workflow}: " + ", ".join(f"{n} {status}" for status, n in by_status.items()))
        lines.append("")
    lines += ["Sweep", "  " + _sweep_line(report["sweep"])]
    backlog = report["backlog"]
    lines += ["  backlog: " + ", ".join(f"{n} {name.replace('_', ' ')}" for name, n in backlog.items()), ""]
    for name, rows in report["oldest"].items():
        if not rows:
            continue
        lines.append(_TITLES[name])
        lines += ["  " + _execution_line(row) for row in rows]
        lines.append("")
    return "\n".join(lines).rstrip() + "\n"


def _sweep_line(sweep: dict[str, Any]) -> str:
    last = sweep["last_run"]
    if last is None:
        return "never ran on this database: is beat running, with the durableflow sweep in its schedule?"
    bound = 3 * sweep["interval_seconds"] + 1
    verdict = "beat is running" if sweep["beat_running"] else f"NOT within {bound:g} s: is beat running?"
    return (
        f"last run {_age(last['age_seconds'])} ago, at {_when(last['finished_at'])} "
        f"(took {last['seconds']:.3f} s; {last['runs']} runs recorded): {verdict}"
    )


def _execution_line(row: dict[str, Any]) -> str:
    parts = [row["id"], row["workflow"], row["status"], f"created {_age(row['age_seconds'])} ago"]
    if "waiting_for" in row:
        parts.append(f"waiting for {row['waiting_for']}")
    for name, label in (("wake_at", "wakes"), ("lease_expires_at", "lease ended"), ("deadline_at", "deadline")):
        if name in row:
            parts.append(f"{label} {_when(row[name])}")
    if "lease_holder" in row:
        parts.append(f"held by {row['lease_holder']}")
    return "  ".join(parts)


def _when(moment: datetime) -> str:
    return moment.astimezone(timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")


def _age(seconds: float) -> str:
    if seconds < 90:
        return f"{seconds:.1f} s"
    if seconds < 5400:
        return f"{seconds / 60:.0f} min"
    if seconds < 48 * 3600:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 86400:.1f} d"


def as_json(report: dict[str, Any]) -> dict[str, Any]:
    """The report with its datetimes as ISO 8601 text (``--json``)."""
    if isinstance(report, dict):
        return {key: as_json(value) for key, value in report.items()}
    if isinstance(report, list):
        return [as_json(value) for value in report]
    if isinstance(report, datetime):
        return report.astimezone(timezone.utc).isoformat()
    return report
