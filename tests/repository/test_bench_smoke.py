"""The benchmark at tiny sizes, so that ``./run bench`` keeps working. It asserts no speed.

Without its peer (DBOS in ``bench/.venv-peer``, which ``./run bench`` installs on first use):
the test suite installs nothing beyond the project's requirements.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from django.conf import settings

from tests.cluster import ROOT

pytestmark = pytest.mark.bench


def test_the_benchmark_runs_end_to_end_at_smoke_sizes(tmp_path):
    backend = "postgres" if settings.DATABASES["default"]["ENGINE"].endswith("postgresql") else "embedded"
    env = {
        key: value
        for key, value in os.environ.items()
        if key not in ("DATABASE_URL", "CELERY_BROKER_URL", "DJANGO_SETTINGS_MODULE", "CELERY_FILESYSTEM_DIR")
    }
    finished = subprocess.run(
        [sys.executable, "-m", "bench", "--smoke", "--no-peer", "--backends", backend, "--out", str(tmp_path)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert finished.returncode == 0, finished.stdout[-3000:] + finished.stderr[-3000:]

    result = json.loads((tmp_path / "latest.json").read_text())
    (summary,) = result["summaries"]
    assert summary["backend"] == backend
    # The shape of a step is structural, not a speed: one statement, no reads.
    assert summary["step"]["queries_per_step"] == 1
    assert summary["step"]["selects_per_step"] == 0
    if backend == "postgres":
        assert summary["step"]["write_transactions_per_step"] == 1
    assert "vs_chain" in summary["throughput"] and "vs_dbos" not in summary["throughput"]
    assert "dbos" not in summary
    # What users get: result() / AsyncResult.get() with their defaults, p50 and p99 of both.
    for size in ("1", "10"):
        assert {"durableflow_p50_ms", "durableflow_p99_ms", "chain_p50_ms", "chain_p99_ms", "vs_chain_p50"} <= set(
            summary["latency"][size]
        )
    starts = summary["starts"]
    assert {"start_p50_ms", "start_p99_ms", "apply_async_p50_ms", "apply_async_p99_ms"} <= set(starts)
    assert {"start_vs_apply_async_p50", "apply_async_many_s", "start_many_s", "start_many_vs_apply_async"} <= set(
        starts
    )
    assert starts["start_many_s"]["median"] > 0 and starts["many"] == 10
    assert {"tick_p50_ms", "tick_p99_ms", "tick_vs_start_p50"} <= set(starts)
    # The floor at the worker's concurrency, and the throughput leg against it.
    assert summary["commit_rate"]["worker_processes"] == 2
    assert {"1", "2"} <= set(summary["commit_rate"]["per_s"])
    assert "steps_over_commit_rate" in summary["throughput"]
    assert {"workflows_per_s", "steps_per_s", "two_over_one"} <= set(summary["throughput"]["one_process"])
    if backend == "postgres":
        assert {"write_transactions_per_workflow", "server_cpu_ms_per_step", "commits_over_commit_rate"} <= set(
            summary["throughput"]
        )
    traces = summary["traces"]  # a delivery traced (SDK provider, in-memory exporter) beside one not
    assert {"delivery_over_untraced", "step_over_untraced", "off_hook_us"} <= set(traces)
    assert "tracing: traced / untraced delivery" in finished.stdout
    targets = {target["name"] for target in summary["targets"]}
    assert {"throughput / Celery chain", "timer lateness p99 (s)"} <= targets
    assert "throughput / DBOS" not in targets
    assert not (tmp_path / "chart.png").exists()
    assert "targets:" in finished.stdout
    assert "chart: skipped" in finished.stdout
