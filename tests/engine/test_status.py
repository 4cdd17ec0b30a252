"""``manage.py durableflow status [--json]`` on a database holding runs in every status, at a
fixed database time: the counts, the sweep's backlog, the oldest late runs, the sweep's last run."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone
from io import StringIO

import pytest
from django.core.management import call_command

from durableflow import metrics, monitoring, operations
from durableflow.engine.states import ExecutionStatus
from durableflow.models import Execution, SweepRun

pytestmark = pytest.mark.django_db

T = datetime(2026, 1, 2, 3, 4, 5, tzinfo=timezone.utc)


def ago(seconds: float) -> datetime:
    return T - timedelta(seconds=seconds)


def _run(pk: str, workflow: str, status: str, created: float, **fields) -> None:
    fields.setdefault("enqueued_at", ago(created))
    Execution.objects.create(id=pk, workflow=workflow, status=status, queue="q", root_id=pk, created_at=ago(created), **fields)


@pytest.fixture
def runs(monkeypatch):
    monkeypatch.setattr(monitoring, "database_now", lambda: T)
    S = ExecutionStatus
    _run("pending-1", "orders", S.PENDING, 100)
    _run("running-expired", "orders", S.RUNNING, 300, lease_token="t1", lease_expires_at=ago(30), lease_holder="web-1 41 7")
    _run("running-held", "orders", S.RUNNING, 20, lease_token="t2", lease_expires_at=ago(-30), enqueued_at=ago(10))
    _run("waiting-timer", "orders", S.WAITING, 3600, wake_at=ago(-60), waiting_for={"kind": "timer"})
    _run("waiting-due", "mail", S.WAITING, 50, wake_at=ago(0.5), waiting_for={"kind": "retry"})
    _run("waiting-overdue", "mail", S.WAITING, 7200, wake_at=ago(120), deadline_at=ago(5), waiting_for={"kind": "timer"})
    _run("waiting-stalled", "mail", S.WAITING, 600, wake_at=ago(-100), waiting_for={"kind": "stalled"})
    for status in (S.COMPLETED, S.FAILED, S.CANCELLED, S.COMPENSATED, S.COMPENSATION_FAILED):
        _run(f"{status}-1", "mail", status, 9000, finished_at=ago(8000))
    SweepRun.objects.create(name="sweep", finished_at=ago(0.5), seconds=0.004, counts={"due": 1}, runs=42)


EXPECTED = """\
durableflow status at 2026-01-02 03:04:05 UTC (the database's clock)

Executions by status
  pending                     1
  running                     2
  waiting                     4
  completed                   1
  failed                      1
  cancelled                   1
  compensated                 1
  compensation_failed         1
  total                      12

By workflow
  mail: 1 cancelled, 1 compensated, 1 compensation_failed, 1 completed, 1 failed, 3 waiting
  orders: 1 pending, 2 running, 1 waiting

Sweep
  last run 0.5 s ago, at 2026-01-02 03:04:04 UTC (took 0.004 s; 42 runs recorded): beat is running
  backlog: 2 due, 1 overdue, 1 expired leases, 2 stale, 1 past deadline, 1 stalled

Oldest waiting
  waiting-overdue  mail  waiting  created 2.0 h ago  waiting for timer  wakes 2026-01-02 03:02:05 UTC  deadline 2026-01-02 03:04:00 UTC
  waiting-timer  orders  waiting  created 60 min ago  waiting for timer  wakes 2026-01-02 03:05:05 UTC
  waiting-stalled  mail  waiting  created 10 min ago  waiting for stalled  wakes 2026-01-02 03:05:45 UTC
  waiting-due  mail  waiting  created 50.0 s ago  waiting for retry  wakes 2026-01-02 03:04:04 UTC

Overdue (due more than a sweep interval ago)
  waiting-overdue  mail  waiting  created 2.0 h ago  waiting for timer  wakes 2026-01-02 03:02:05 UTC  deadline 2026-01-02 03:04:00 UTC

Expired leases
  running-expired  orders  running  created 5 min ago  lease ended 2026-01-02 03:03:35 UTC  held by web-1 41 7

Past their deadline, not cancelled yet
  waiting-overdue  mail  waiting  created 2.0 h ago  waiting for timer  wakes 2026-01-02 03:02:05 UTC  deadline 2026-01-02 03:04:00 UTC

Stalled (code that does not match the journal)
  waiting-stalled  mail  waiting  created 10 min ago  waiting for stalled  wakes 2026-01-02 03:05:45 UTC
"""


def test_status_prints_counts_backlog_oldest_and_the_sweeps_last_run(runs):
    out = StringIO()
    call_command("durableflow", "status", stdout=out)
    assert out.getvalue() == EXPECTED


def test_status_json_holds_the_same_report(runs):
    out = StringIO()
    call_command("durableflow", "status", "--json", stdout=out)
    report = json.loads(out.getvalue())

    assert report["now"] == "2026-01-02T03:04:05+00:00"
    assert report["counts"] == {
        "pending": 1, "running": 2, "waiting": 4, "completed": 1, "failed": 1, "cancelled": 1,
        "compensated": 1, "compensation_failed": 1,
    }  # fmt: skip
    assert report["workflows"]["orders"] == {"pending": 1, "running": 2, "waiting": 1}
    assert report["backlog"] == {
        "due": 2, "overdue": 1, "expired_leases": 1, "stale": 2, "past_deadline": 1, "stalled": 1,
    }  # fmt: skip
    assert report["sweep"] == {
        "interval_seconds": 1.0,
        "last_run": {
            "finished_at": "2026-01-02T03:04:04.500000+00:00",
            "age_seconds": 0.5,
            "seconds": 0.004,
            "counts": {"due": 1},
            "runs": 42,
        },
        "beat_running": True,
    }
    assert [row["id"] for row in report["oldest"]["waiting"]] == [
        "waiting-overdue", "waiting-timer", "waiting-stalled", "waiting-due",
    ]  # fmt: skip
    assert report["oldest"]["expired_leases"] == [
        {
            "id": "running-expired",
            "workflow": "orders",
            "status": "running",
            "created_at": "2026-01-02T02:59:05+00:00",
            "age_seconds": 300.0,
            "lease_expires_at": "2026-01-02T03:03:35+00:00",
            "lease_holder": "web-1 41 7",
        }
    ]
    assert [row["id"] for row in report["oldest"]["stalled"]] == ["waiting-stalled"]


def test_status_says_when_the_sweep_never_ran_or_is_late(runs):
    SweepRun.objects.update(finished_at=ago(60))
    out = StringIO()
    call_command("durableflow", "status", stdout=out)
    assert "last run 60.0 s ago, at 2026-01-02 03:03:05 UTC (took 0.004 s; 42 runs recorded): NOT within 4 s: is beat running?" in out.getvalue()

    SweepRun.objects.all().delete()
    out = StringIO()
    call_command("durableflow", "status", stdout=out)
    assert "  never ran on this database: is beat running, with the durableflow sweep in its schedule?\n" in out.getvalue()
    assert json.loads(_json())["sweep"] == {"interval_seconds": 1.0, "last_run": None, "beat_running": False}


def _json() -> str:
    out = StringIO()
    call_command("durableflow", "status", "--json", stdout=out)
    return out.getvalue()


def test_every_sweep_records_its_run():
    assert monitoring.last_sweep() is None
    operations.sweep()
    operations.sweep()
    last = monitoring.last_sweep()
    assert last["runs"] == 2 and set(last["counts"]) >= {"due", "stale", "deadlines"}
    assert 0 <= last["age_seconds"] < 5 and last["seconds"] >= 0


def test_the_metrics_snapshot_holds_the_counts_backlog_and_the_sweeps_age(runs):
    snapshot = metrics.snapshot()
    assert snapshot == {
        "executions": monitoring.counts(),
        "backlog": {"due": 2, "overdue": 1, "expired_leases": 1, "stale": 2, "past_deadline": 1, "stalled": 1},
        "sweep": {"last_run_age_seconds": 0.5, "last_run_seconds": 0.004},
    }
    assert snapshot["executions"]["waiting"] == 4 and sum(snapshot["executions"].values()) == 12


def test_the_prometheus_collector_exposes_the_snapshot(runs):
    prometheus_client = pytest.importorskip("prometheus_client")
    registry = prometheus_client.CollectorRegistry()
    registry.register(metrics.Collector())
    text = prometheus_client.generate_latest(registry).decode()
    assert 'durableflow_executions{status="waiting"} 4.0' in text
    assert 'durableflow_backlog{kind="overdue"} 1.0' in text
    assert "durableflow_sweep_age_seconds 0.5" in text


def test_the_collector_says_what_it_needs_without_prometheus_client(monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "prometheus_client", None)  # as if not installed
    with pytest.raises(ImportError, match="pip install prometheus-client"):
        metrics.Collector()
