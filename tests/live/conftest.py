"""Tests on real worker processes: a Celery worker and beat (``cluster``, ``workers``, or a
``Cluster`` of their own) against the test database, with real brokers; crashes, kills, deploys,
dropped connections. Each waits by polling the database, never by sleeping.

Everything in this folder is marked ``integration`` here (``./run tests`` on RabbitMQ runs
``-m integration``); a test elsewhere that starts workers carries the mark itself.
"""

from __future__ import annotations

from pathlib import Path

import pytest

HERE = Path(__file__).parent


@pytest.hookimpl(tryfirst=True)  # before ``-m`` selects by marks
def pytest_collection_modifyitems(items):
    for item in items:
        if item.path.is_relative_to(HERE):
            item.add_marker(pytest.mark.integration)
