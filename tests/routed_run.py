"""Run by tests/live/test_routing.py in its own pytest process, with DURABLEFLOW_TEST_ROUTED=1:
durableflow's tables live in the ``durableflow`` alias, the project's in ``default``.

Not collected by the normal run (the file name does not start with ``test_``).
"""

from __future__ import annotations

import pytest
from django.db import connections

import durableflow
from durableflow.models import Execution, StepRecord
from durableflow.orm import db_alias
from tests.helpers import wait_status

pytestmark = pytest.mark.integration


def test_a_workflow_completes_with_durableflows_tables_in_a_second_alias(cluster, live_db):
    assert db_alias() == "durableflow"

    execution = durableflow.start("t.steps", {"n": 1})
    done = wait_status(execution.id, timeout=60)
    assert done.result == {"a": 1, "b": 2, "c": {"sum": 3}}
    assert durableflow.result(execution.id, timeout=10) == done.result

    # The rows are in the second database, and only there.
    assert Execution.objects.using("durableflow").filter(pk=execution.id).exists()
    assert StepRecord.objects.using("durableflow").filter(execution_id=execution.id).count() == 3
    with connections["default"].cursor() as cursor:
        tables = connections["default"].introspection.table_names(cursor)
    assert Execution._meta.db_table not in tables
