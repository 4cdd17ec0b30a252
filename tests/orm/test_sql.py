"""Unit tests of the hot path's decoding: journal rows as the drivers return them."""

import json
from datetime import UTC, datetime

import pytest

from durableflow.engine.states import StepStatus
from durableflow.orm import sql


@pytest.mark.parametrize(
    "text, expected",
    [
        ("7", 7),
        ('"seven"', "seven"),
        ('{"a":[1,2.5,null,true]}', {"a": [1, 2.5, None, True]}),
        ('{"a": [1, 2.5, null, true]}', {"a": [1, 2.5, None, True]}),  # jsonb's text
        (b'{"b":1}', {"b": 1}),
    ],
)
def test_loads_reads_journal_json(text, expected):
    assert sql._loads(text) == expected


@pytest.mark.parametrize("text", ["nul", "1 2", '{"a":1} x', ""])
def test_loads_refuses_what_json_refuses(text):
    with pytest.raises(json.JSONDecodeError):
        sql._loads(text)


def test_loads_passes_decoded_values_through():
    assert sql._loads(None) is None
    assert sql._loads({"already": "decoded"}) == {"already": "decoded"}


def test_journal_row_parses_its_timestamps_when_read():
    row = sql.decode_record(("k", "run", StepStatus.COMPLETED, 1, "42", None, "{}", "2026-11-29 12:00:00.250000", None))
    assert (row.key, row.value, row.error, row.meta) == ("k", 42, None, {})
    assert row.started_at == datetime(2026, 11, 29, 12, 0, 0, 250000, tzinfo=UTC)
    assert row.started_at is row.started_at  # parsed once, then kept
    assert row.finished_at is None


def test_journal_row_makes_naive_datetimes_aware():
    naive = datetime(2026, 11, 29, 12, 0, 0)
    row = sql.decode_record(("k", "sleep", StepStatus.WAITING, 0, None, '{"code":"X"}', '{"until":"u"}', naive, naive))
    assert row.started_at == naive.replace(tzinfo=UTC)
    assert row.error == {"code": "X"} and row.meta == {"until": "u"}
    row.finished_at = None
    assert row.finished_at is None


def test_the_journal_read_returns_each_timestamp_as_written_whatever_the_datestyle(live_db):
    """The journal's timestamps come back as UTC text (parsed only when read), the same as the
    ORM reads them; on PostgreSQL the session's DateStyle does not change them."""
    from django.db import connection

    import durableflow
    from durableflow import operations
    from durableflow.models import StepRecord
    from durableflow.orm import OrmStorage

    execution = durableflow.start("t.steps", queue="durableflow-test-sql")
    assert operations.deliver(execution.id) == "completed"
    steps = StepRecord.objects.filter(execution_id=execution.id)
    written = {row.key: (row.started_at, row.finished_at) for row in steps}
    styles = ["ISO, MDY", "SQL, DMY", "German", "Postgres, YMD"] if connection.vendor == "postgresql" else [None]
    statements, cursor = OrmStorage()._sql()
    try:
        for style in styles:
            if style is not None:
                cursor.execute(f"SET DateStyle = '{style}'")
            cursor.execute(statements.journal_sql, {"id": execution.id})
            read = {row.key: (row.started_at, row.finished_at) for row in map(sql.decode_record, cursor.fetchall())}
            assert read == written, style
    finally:
        if styles[0] is not None:
            cursor.execute("RESET DateStyle")
