"""Every test that starts real worker processes is marked ``integration``: ``./run tests`` on
RabbitMQ selects them so (``-m integration``), and the live tier is what that mark names.

The whole suite is collected in a pytest process of its own (nothing runs), and each test's
fixtures are read from it: one that uses ``cluster`` or ``workers``, or sits in ``tests/live/``,
must carry the mark.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

from tests.cluster import ROOT

WORKERS = {"cluster", "workers"}


def collected(tmp_path) -> list[dict]:
    out = tmp_path / "collected.jsonl"
    finished = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "tests.collected", "-p", "no:cacheprovider"],
        cwd=ROOT, env={**os.environ, "DURABLEFLOW_TEST_COLLECTED": str(out)},
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert finished.returncode == 0, finished.stdout[-3000:] + finished.stderr[-3000:]
    return [json.loads(line) for line in out.read_text().splitlines()]


def test_every_test_that_starts_workers_is_marked_integration(tmp_path):
    tests = collected(tmp_path)
    on_workers = [t for t in tests if WORKERS & set(t["fixtures"]) or t["id"].startswith("tests/live/")]
    unmarked = [t["id"] for t in on_workers if "integration" not in t["marks"]]

    assert len(tests) > 1000 and len(on_workers) > 100  # the whole suite was seen, and its live tier
    assert not unmarked, f"tests on real workers without the integration mark: {unmarked}"
