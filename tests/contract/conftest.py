"""The contract suite: every verb through the one ``Engine`` over both storages (``backend``,
in ``tests/conftest.py``: the shipped ``WorkflowTester`` in memory, and the ORM on SQLite or
PostgreSQL; ``tests/harness.py``), deliveries in the test process under the test's control.

A capability's behaviour is written here once and must hold on both; what only one storage
can show goes to ``tests/engine/`` or ``tests/orm/``.
"""

from __future__ import annotations

import pytest

from tests.contract.calls import calls


@pytest.fixture
def call_log() -> list[str]:
    """The patches' and versions' call log, empty (``usefixtures`` in their modules)."""
    calls.clear()
    return calls
