"""Database routers are honoured: a project can keep durableflow's tables in a second alias."""

from __future__ import annotations

import os
import subprocess
import sys

from tests.cluster import ROOT


def test_workflows_run_with_the_tables_routed_to_a_second_database(tmp_path):
    """A pytest of its own (the settings differ for the whole process and its workers), on its
    own databases so that it cannot touch this session's."""
    env = {**os.environ, "DURABLEFLOW_TEST_ROUTED": "1", "DURABLEFLOW_VAR_DIR": str(tmp_path)}
    if env.get("DATABASE_URL"):
        env["DATABASE_URL"] = env["DATABASE_URL"].rstrip("/") + "_routing"
    if env.get("CELERY_FILESYSTEM_DIR"):
        env["CELERY_FILESYSTEM_DIR"] = str(tmp_path / "broker")
    if env.get("CELERY_BROKER_URL", "").startswith("redis://"):
        # Its own Redis database: its cluster fixture flushes it, and its workers consume
        # the same queue names as this session's.
        base, _, db = env["CELERY_BROKER_URL"].rpartition("/")
        env["CELERY_BROKER_URL"] = f"{base}/{14 if db != '14' else 13}"
    elif env.get("CELERY_BROKER_URL", "").startswith("amqp://"):
        # RabbitMQ: the default virtual host (every server has it), when this session has its own.
        base, _, vhost = env["CELERY_BROKER_URL"].rpartition("/")
        if vhost:
            env["CELERY_BROKER_URL"] = f"{base}//"
    finished = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/routed_run.py"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert finished.returncode == 0, finished.stdout[-4000:] + finished.stderr[-2000:]
    assert "1 passed" in finished.stdout
