"""The driver's own connection to the chaos database, in PostgreSQL's or SQLite's spelling.

The invariants and the driver write their queries once, with ``%s`` placeholders, and take
the few spellings that differ from here: a column among a list of ids, the database's clock,
a moment some seconds ago, the time a step's record became visible, a JSON column's value.

SQLite keeps no commit times: there ``prepare`` adds a trigger that notes, in the ledger
(kind ``record``), SQLite's clock inside each write of a step record. The write holds the
database's write lock until it commits, and a ledger row's time is taken once its insert holds
that lock: a body that began after the record committed has a later time than the note, one
that began before has an earlier one (the clocks are the same, in milliseconds).
"""

from __future__ import annotations

import json
import sqlite3
import time
from typing import Any

RETRY_FOR = 90.0  # seconds a query keeps trying while the database drops, restarts or is locked


class _Sql:
    """Rows of a query (``sql(query, args)``), on a new connection while the database is away."""

    now: str  # the database's clock
    _among: str  # "{column}" is one of a list passed as one argument
    _ago: str  # "{seconds}" before the database's clock
    _recorded: str  # when "{record}" (a step record's alias) became visible

    def __init__(self) -> None:
        self._connection: Any = None

    def among(self, column: str) -> str:
        return self._among.format(column=column)

    def seconds_ago(self, seconds: float) -> str:
        return self._ago.format(seconds=float(seconds))

    def recorded_at(self, record: str) -> str:
        return self._recorded.format(record=record)

    def prepare(self) -> None:
        """What the checks need in the migrated database, before any run."""

    def __call__(self, query: str, args: list | tuple = ()) -> list[tuple]:
        deadline = time.monotonic() + RETRY_FOR
        while True:
            try:
                if self._connection is None:
                    self._connection = self._connect()
                return self._execute(query, args)
            except Exception as error:
                if not self._transient(error) or time.monotonic() > deadline:
                    raise
                self.close()
                time.sleep(0.1)

    def close(self) -> None:
        if self._connection is not None:
            self._connection.close()
            self._connection = None


class PostgresSql(_Sql):
    now = "clock_timestamp()"
    _among = "{column} = ANY(%s)"
    _ago = "clock_timestamp() - interval '{seconds} seconds'"
    _recorded = "coalesce(pg_xact_commit_timestamp({record}.xmin), {record}.finished_at)"

    def __init__(self, db: dict):
        super().__init__()
        self.db = db

    @staticmethod
    def json(value: Any) -> Any:
        return value  # psycopg decodes jsonb

    def _connect(self):
        import psycopg

        return psycopg.connect(
            host="127.0.0.1", port=self.db["PORT"], user="postgres", dbname=self.db["NAME"], autocommit=True,
            connect_timeout=3,
        )  # fmt: skip

    def _execute(self, query: str, args) -> list[tuple]:
        cursor = self._connection.execute(query, args)
        return cursor.fetchall() if cursor.description else []

    @staticmethod
    def _transient(error: Exception) -> bool:
        import psycopg

        return isinstance(error, psycopg.OperationalError)  # dropped, or the server restarting


class SqliteSql(_Sql):
    # Django's own spelling of SQLite's clock: UTC text that compares with its datetimes.
    now = "strftime('%Y-%m-%d %H:%M:%f', 'now')"
    _among = "{column} IN (SELECT value FROM json_each(%s))"
    _ago = "strftime('%Y-%m-%d %H:%M:%f', 'now', '-{seconds} seconds')"
    _recorded = (
        "coalesce((SELECT n.at FROM testapp_chaosledger n WHERE n.kind = 'record' AND n.nonce = "
        "{record}.execution_id || ' ' || {record}.key), {record}.finished_at)"
    )
    # The ledger's nonce for a record's note is "<execution> <key>": the last write's time stays.
    _NOTE = (
        "INSERT OR REPLACE INTO testapp_chaosledger (nonce, execution_id, step, kind, pid, at) VALUES "
        "(NEW.execution_id || ' ' || NEW.key, NEW.execution_id, NEW.key, 'record', 0, {now});"
    )

    def __init__(self, path: str):
        super().__init__()
        self.path = path

    @staticmethod
    def json(value: Any) -> Any:
        return None if value is None else json.loads(value)

    def _connect(self):
        return sqlite3.connect(self.path, timeout=20, isolation_level=None)

    def prepare(self) -> None:
        note = self._NOTE.format(now=self.now)
        for event in ("INSERT", "UPDATE"):
            self(f"CREATE TRIGGER IF NOT EXISTS chaos_note_record_{event.lower()} AFTER {event} "
                 f"ON durableflow_steprecord BEGIN {note} END")  # fmt: skip

    def _execute(self, query: str, args) -> list[tuple]:
        # A list argument goes as JSON (see _among).
        args = [json.dumps(a) if isinstance(a, (list, tuple)) else a for a in args]
        return self._connection.execute(query.replace("%s", "?"), args).fetchall()

    @staticmethod
    def _transient(error: Exception) -> bool:
        return isinstance(error, sqlite3.OperationalError) and "locked" in str(error)
