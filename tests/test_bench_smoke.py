"""The benchmark at tiny sizes, so that ``./run bench`` keeps working. It asserts no speed."""

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
        [sys.executable, "-m", "bench", "--smoke", "--backends", backend, "--out", str(tmp_path)],
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
    assert {"vs_chain", "vs_dbos"} <= set(summary["throughput"])
    assert {target["name"] for target in summary["targets"]} >= {"throughput / DBOS", "timer lateness p99 (s)"}
    assert (tmp_path / "chart.png").stat().st_size > 1000
    assert "targets:" in finished.stdout
