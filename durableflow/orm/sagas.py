"""The ORM storage's part for sagas and metadata: the metadata row lock, journal copies."""

from __future__ import annotations

from typing import Any

from durableflow.engine.records import RECORD_FIELDS, StepRecordData
from durableflow.models import StepRecord
from durableflow.orm.core import OrmCore
from durableflow.orm.sql import decode_json

__all__ = ["OrmSagas"]


class OrmSagas(OrmCore):
    """Metadata and journal copies on the models (a part of ``OrmStorage``)."""

    def lock_metadata(self, execution_id: str) -> dict[str, Any] | None:
        # Called inside the caller's transaction: FOR UPDATE holds the row until it ends, so
        # concurrent read-modify-writes of one execution's metadata queue up instead of losing one.
        sql, cursor = self._sql()
        cursor.execute(sql.metadata_lock_sql, {"id": execution_id})
        row = cursor.fetchone()
        return None if row is None else (decode_json(row[0]) or {})

    def add_steps(self, execution_id: str, records: list[StepRecordData]) -> None:
        self._steps().bulk_create(
            [
                StepRecord(execution_id=execution_id, **{name: getattr(record, name) for name in RECORD_FIELDS})
                for record in records
            ]
        )
