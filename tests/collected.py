"""A pytest plugin (``-p tests.collected``): writes each collected test's id, fixtures and marks
as JSON lines to ``$DURABLEFLOW_TEST_COLLECTED`` (``tests/repository/test_markers.py`` reads it)."""

from __future__ import annotations

import json
import os


def pytest_collection_finish(session) -> None:
    with open(os.environ["DURABLEFLOW_TEST_COLLECTED"], "w") as out:
        for item in session.items:
            fixtures = sorted(getattr(item, "fixturenames", ()))
            marks = sorted({mark.name for mark in item.iter_markers()})
            out.write(json.dumps({"id": item.nodeid, "fixtures": fixtures, "marks": marks}) + "\n")
