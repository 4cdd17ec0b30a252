"""The delivery hot path's statements, written by hand for PostgreSQL and SQLite.

The ORM would need two round trips to claim (UPDATE, then SELECT) and compiles each
query anew; a delivery is one claim, one journal read (none on a first delivery: the claim
says whether there are records), one statement per live step and one outcome, so these few
statements are kept here, once per database vendor, with the conditional updates of one
execution or one step record (``update``) and the metadata lock. On PostgreSQL ``cursor``
prepares them: each is parsed and planned once per connection.
"""

from __future__ import annotations

import json
from datetime import datetime, timezone
from typing import Any, Callable, Iterable, overload

from django.utils.dateparse import parse_datetime

from durableflow.engine.predicates import CLAIM_FIELDS, CLAIMABLE
from durableflow.engine.records import RECORD_FIELDS, StepRecordData
from durableflow.engine.states import ExecutionStatus
from durableflow.engine.storage import ANY, NOW
from durableflow.orm.predicates import to_sql

__all__ = ["statements", "fenced_insert", "RECORD_FIELDS", "ASYNC_COMMIT"]

S = ExecutionStatus

# The claim's transaction (only it: ``true`` makes the setting local to it) commits without
# waiting for its WAL to reach the disk (an item task's two writes too: ``durableflow.orm.items``).
# Safe because nothing outside the delivery acts on a claim: a claim lost with a crashed
# database server leaves the execution as it was (pending, or under an expired lease), the
# delivery's next fenced write fails, and the sweep delivers it again; any write the delivery
# commits afterwards waits for the disk, and with it the claim.
ASYNC_COMMIT = ", set_config('synchronous_commit', 'off', true)"


class Statements:
    """SQL for one database vendor. Times are the database's clock, shifted by an offset (tests).

    Table and column names come from the models' ``_meta``, quoted by the connection, so a
    project that renames or routes the tables gets the same statements.
    """

    def __init__(self, vendor: str, qn: Callable[[str], str]) -> None:
        from durableflow.models import Execution, StepRecord

        self.vendor = vendor
        # Each model's JSON columns: their parameters are JSON text (cast to jsonb on PostgreSQL).
        self._json = {
            table: frozenset(f.name for f in model._meta.concrete_fields if f.get_internal_type() == "JSONField")
            for table, model in (("execution", Execution), ("step", StepRecord))
        }
        if vendor == "postgresql":
            self._moment = "(STATEMENT_TIMESTAMP() + %({name})s * INTERVAL '1 second')"
            # Typed placeholders: the statements are prepared (server-side binding), and an
            # INSERT ... SELECT does not infer parameter types from its target columns.
            casts = {
                "attempts": "::integer",
                "started_at": "::timestamptz",
                "finished_at": "::timestamptz",
                "wake_at": "::timestamptz",
                "lease_expires_at": "::timestamptz",
                "enqueued_at": "::timestamptz",
                **{name: "::jsonb" for names in self._json.values() for name in names},
            }
        else:
            self._moment = "STRFTIME('%%Y-%%m-%%d %%H:%%M:%%f', 'NOW', %({name})s)"
            casts = {}

        def ec(name: str) -> str:  # an Execution column
            return qn(Execution._meta.get_field(name).column)

        def sc(name: str) -> str:  # a StepRecord column
            return qn(StepRecord._meta.get_field(name).column)

        execution, step = qn(Execution._meta.db_table), qn(StepRecord._meta.db_table)
        now, until = self._moment.format(name="now"), self._moment.format(name="until")
        text = "::text" if casts else ""  # typed text parameters, for the prepared statements
        # Claimable (``predicates.CLAIMABLE``): may move to running (once due, if it must be),
        # the lease free (none, expired, or ``take_over``: one whose holder is gone; NULL
        # matches nothing), admitted by its concurrency key.
        claimable = to_sql(CLAIMABLE, ec, now, lambda name: f"%({name})s{text}")
        self.claim_sql = (
            f"UPDATE {execution} SET {ec('status')} = '{S.RUNNING}', {ec('lease_token')} = %(token)s, "
            f"{ec('lease_expires_at')} = {until}, {ec('lease_holder')} = %(holder)s{text}, "
            f"{ec('deliveries')} = {ec('deliveries')} + 1, "
            # The previous delivery's lease, as the row had it (SET reads the old row).
            f"{ec('lost_deliveries')} = CASE WHEN {ec('lease_token')} IS NULL THEN 0 "
            f"ELSE {ec('lost_deliveries')} + 1 END, "
            f"{ec('started_at')} = COALESCE({ec('started_at')}, {now}), {ec('wake_pending')} = FALSE "
            f"WHERE {ec('id')} = %(id)s AND {claimable} "
            f"RETURNING {', '.join(ec(c) for c in CLAIM_FIELDS)}, "
            # Whether there is a journal to read: a first delivery skips that round trip.
            f"EXISTS (SELECT 1 FROM {step} WHERE {step}.{sc('execution')} = {execution}.{ec('id')}), {now}"
            f"{ASYNC_COMMIT if vendor == 'postgresql' else ''}"
        )
        # Timestamps as UTC text, parsed only when a record's are read (``JournalRow``; a replay
        # reads none): the drivers' converters would parse two per record of a long journal on
        # every delivery (on PostgreSQL, half of a 10,000-step replay). to_char, not ::text, so
        # that the server's DateStyle cannot change the form; aware() reads it with fromisoformat.
        if vendor == "postgresql":
            as_text = "to_char({} AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI:SS.US')"
        else:
            as_text = "CAST({} AS TEXT)"
        read = [as_text.format(sc(c)) if c.endswith("_at") else sc(c) for c in RECORD_FIELDS]
        # No ORDER BY: replay looks records up by key; sorting a long journal costs a sort.
        self.journal_sql = f"SELECT {', '.join(read)} FROM {step} WHERE {sc('execution')} = %(id)s"
        values = [f"%({c})s{casts.get(c, text)}" for c in ("execution_id", *RECORD_FIELDS)]
        # One statement, so one write transaction: it inserts only while the lease is ours,
        # and a key recorded already is left as it is (the caller finds out which it was).
        self.insert_sql = (
            f"INSERT INTO {step} ({', '.join(sc(c) for c in ('execution', *RECORD_FIELDS))}) "
            f"SELECT {', '.join(values)} "
            f"WHERE EXISTS (SELECT 1 FROM {execution} WHERE {ec('id')} = %(execution_id)s{text} "
            f"AND {ec('lease_token')} = %(token)s{text}) "
            f"ON CONFLICT ({sc('execution')}, {sc('key')}) DO NOTHING"
        )
        self.now_sql = f"SELECT {now}"
        # An execution's metadata, its row locked until the caller's transaction ends (SQLite
        # has no row locks: its writers are serialised).
        self.metadata_lock_sql = f"SELECT {ec('metadata')} FROM {execution} WHERE {ec('id')} = %(id)s{text}" + (
            " FOR UPDATE" if vendor == "postgresql" else ""
        )
        self._casts, self._text, self._ec, self._table = casts, text, ec, execution
        self._step_table = step
        self._tables = {"execution": execution, "step": step}
        self._columns = {"execution": ec, "step": sc}
        self._updates: dict[tuple, str] = {}
        self._execution_inserts: dict[tuple[tuple[str, ...], tuple[str, ...]], ExecutionInsert] = {}

    def outcome(
        self, fields: dict[str, Any], execution_id: str, token: str, adapt, *, unless_woken: bool = False
    ) -> tuple[str, dict[str, Any]]:
        """UPDATE of the execution's outcome ``fields``, fenced by the lease token, returning
        whether the execution is watched; ``unless_woken``: only if no wake-up is pending."""
        return self.update(
            "execution", fields, {"id": execution_id}, adapt, token=token, unless_woken=unless_woken, watched=True
        )

    def update(
        self,
        table: str,
        fields: dict[str, Any],
        row: dict[str, str],
        adapt,
        *,
        offset: float = 0.0,
        token: Any = ANY,
        statuses: Iterable[str] | None = None,
        unless_woken: bool = False,
        watched: bool = False,
    ) -> tuple[str, dict[str, Any]]:
        """UPDATE of one row's ``fields`` (``NOW``: the database clock, shifted by ``offset``
        seconds), and its parameters. ``table``: ``"execution"`` (``row``: its ``id``) or
        ``"step"`` (its ``execution_id`` and ``key``).

        Conditions: ``statuses`` (the row's status is one of them), ``token`` (the execution's
        lease token is this one; ``None``: it has none), ``unless_woken`` (no wake-up pending),
        and ``watched`` returns whether the execution is watched. One statement text per shape,
        so that it is prepared once per connection.
        """
        statuses = None if statuses is None else sorted(statuses)
        names = tuple(sorted(fields))
        now = frozenset(name for name in names if fields[name] is NOW)
        fence = "any" if token is ANY else "none" if token is None else "token"
        shape = (table, names, now, fence, None if statuses is None else len(statuses), unless_woken, watched)
        sql = self._updates.get(shape)
        if sql is None:
            sql = self._updates[shape] = self._update_sql(table, names, now, fence, statuses, unless_woken, watched)
        params: dict[str, Any] = {f"fence_{name}": value for name, value in row.items()}
        if now:
            params["now"] = self.moment(offset)
        if fence == "token":
            params["fence_token"] = token
        for number, status in enumerate(statuses or ()):
            params[f"status_{number}"] = status
        params.update(self.assigned(table, fields, adapt))
        return sql, params

    def assignments(self, table: str, names: tuple[str, ...], now: frozenset[str]) -> str:
        """``column = value, ...`` of ``table``'s fields ``names`` (those in ``now``: the clock,
        parameter ``now``; the others: parameters ``v_<name>``, see ``assigned``)."""
        column, moment = self._columns[table], self._moment.format(name="now")

        def value(name: str) -> str:
            return moment if name in now else self.placeholder(name, f"v_{name}")

        return ", ".join(f"{column(name)} = {value(name)}" for name in names)

    def placeholder(self, name: str, param: str) -> str:
        """The placeholder of parameter ``param`` holding a value of field ``name`` (typed on
        PostgreSQL where the column's type cannot be inferred: JSON, timestamps, integers)."""
        return f"%({param})s{self._casts.get(name, '')}"

    def assigned(self, table: str, fields: dict[str, Any], adapt) -> dict[str, Any]:
        """The ``v_<name>`` parameters of ``assignments`` for ``fields`` (``NOW`` left out)."""
        params = {}
        json = self._json[table]
        for name, value in fields.items():
            if value is NOW:
                continue
            if name in json:
                value = None if value is None else _dumps(value)
            elif isinstance(value, datetime):
                value = adapt(value)
            params[f"v_{name}"] = value
        return params

    def column(self, table: str, name: str) -> str:
        """The quoted column of field ``name`` of ``table`` (``"execution"`` or ``"step"``)."""
        return self._columns[table](name)

    def table(self, table: str) -> str:
        """The quoted name of ``table`` (``"execution"`` or ``"step"``)."""
        return self._tables[table]

    def param(self, name: str) -> str:
        """A text parameter's placeholder (typed on PostgreSQL: the statements are prepared)."""
        return f"%({name})s{self._text}"

    def _update_sql(self, table, names, now, fence, statuses, unless_woken, watched) -> str:
        column, text, ec = self._columns[table], self._text, self._ec
        assignments = self.assignments(table, names, now)
        if table == "execution":
            where = [f"{ec('id')} = %(fence_id)s{text}"]
            lease = ec("lease_token")
        else:
            where = [f"{column('execution')} = %(fence_execution_id)s{text}", f"{column('key')} = %(fence_key)s{text}"]
            lease = None
        if statuses is not None:
            where.append(f"{column('status')} IN ({', '.join(f'%(status_{n})s' for n in range(len(statuses)))})")
        if fence != "any":
            held = f"= %(fence_token)s{text}" if fence == "token" else "IS NULL"
            if lease is not None:
                where.append(f"{lease} {held}")
            else:  # a step's execution holds the lease
                where.append(
                    f"EXISTS (SELECT 1 FROM {self._table} WHERE {ec('id')} = {self._step_table}.{column('execution')} "
                    f"AND {ec('lease_token')} {held})"
                )
        if unless_woken:
            where.append(f"{ec('wake_pending')} = FALSE")
        returning = f" RETURNING {ec('watched')}" if watched else ""
        return f"UPDATE {self._tables[table]} SET {assignments} WHERE {' AND '.join(where)}{returning}"

    def hot_path(self) -> dict[str, str]:
        """The statements of a one-step delivery, by name, as this vendor runs them: the claim,
        the journal read, the fenced step INSERT and the completed outcome. Written out, formatted,
        in ``durableflow/orm/statements/<vendor>.sql`` (``tests/orm/test_sql_text.py`` keeps that file
        equal to what is built here, so that a change to the hot path shows in review as SQL)."""
        from durableflow.engine.records import Completed, outcome_fields

        fields, _ = outcome_fields(Completed(None), datetime.now(timezone.utc))
        fields["finished_at"] = NOW
        return {
            "claim": self.claim_sql,
            "journal": self.journal_sql,
            "insert_step": self.insert_sql,
            "outcome": self.outcome(fields, "id", "token", lambda value: value)[0],
        }

    def execution_insert(self, names: tuple[str, ...], now: tuple[str, ...]) -> ExecutionInsert:
        """The INSERT of executions given the fields ``names``, and ``now`` as ``NOW``."""
        insert = self._execution_inserts.get((names, now))
        if insert is None:
            insert = self._execution_inserts[(names, now)] = ExecutionInsert(names, now, self._table, self._ec)
        return insert

    def moment_sql(self, name: str) -> str:
        """This vendor's expression for the database clock shifted by the seconds in parameter ``name``."""
        return self._moment.format(name=name)

    def moment(self, seconds: float) -> Any:
        """The parameter for ``now + seconds`` in this vendor's time expression."""
        return seconds if self.vendor == "postgresql" else f"{seconds:+.6f} seconds"

    def claim_params(
        self,
        execution_id: str,
        token: str,
        lease_seconds: float,
        offset: float,
        holder: str | None = None,
        take_over: str | None = None,
    ) -> dict:
        return {
            "id": execution_id,
            "token": token,
            "now": self.moment(offset),
            "until": self.moment(offset + lease_seconds),
            "holder": holder,
            "take_over": take_over,
        }

    def insert_params(self, record: StepRecordData, execution_id: str, token: str, adapt) -> dict:
        params: dict[str, Any] = {"execution_id": execution_id, "token": token}
        for name in RECORD_FIELDS:
            value = getattr(record, name)
            if name == "meta":
                value = _dumps(value or {})
            elif name in self._json["step"]:
                value = None if value is None else _dumps(value)
            elif isinstance(value, datetime):
                value = adapt(value)
            params[name] = value
        return params


class ExecutionInsert:
    """One INSERT of many executions that leaves out those whose id or (workflow, idempotency
    key) is taken, returning the id and the database-set columns of those it inserted.

    ``ON CONFLICT DO NOTHING`` (no target: every unique constraint) means a repeat raises
    nothing, so a caller's transaction needs no savepoint around it. The columns are the
    fields given, plus those the ORM would fill from a Python default (``metadata``,
    ``deliveries``...); the fields given as ``NOW`` are left to their database default
    (``created_at``: the database's clock), which the INSERT returns.
    """

    def __init__(self, names: tuple[str, ...], now: tuple[str, ...], table: str, ec: Callable[[str], str]) -> None:
        from durableflow.models import Execution

        fields = Execution._meta.concrete_fields
        for name in now:
            if not Execution._meta.get_field(name).has_db_default():
                raise ValueError(f"{name} has no database default: give it a value, not NOW")
        given = {Execution._meta.get_field(name).attname for name in (*names, *now)}
        self.columns = names
        self.defaults = [
            f for f in fields if f.attname not in given and not f.has_db_default() and (f.has_default() or not f.null)
        ]
        self.returned = [f.attname for f in fields if f.has_db_default() and f.attname not in set(names)]
        kinds = {name: Execution._meta.get_field(name).get_internal_type() for name in names}
        self.json = frozenset(name for name, kind in kinds.items() if kind == "JSONField")
        self.encoded = self.json | {name for name, kind in kinds.items() if kind == "DateTimeField"}
        self.attnames = [f.attname for f in fields]
        self.width = len(names) + len(self.defaults)
        self._row = "(" + ", ".join(["%s"] * self.width) + ")"
        self._head = (
            f"INSERT INTO {table} ({', '.join(ec(name) for name in (*names, *(f.name for f in self.defaults)))}) "
            "VALUES "
        )
        self._tail = f" ON CONFLICT DO NOTHING RETURNING {', '.join(ec(name) for name in ('id', *self.returned))}"
        self._numbered = self._head + "(" + ", ".join(f"${n}" for n in range(1, self.width + 1)) + ")" + self._tail

    def sql(self, rows: int) -> str:
        return self._head + ", ".join([self._row] * rows) + self._tail

    def numbered_sql(self) -> str:
        """The INSERT of one row with PostgreSQL's own placeholders (``$1``...), for libpq."""
        return self._numbered

    def params(self, rows: list[dict[str, Any]], adapt) -> list[Any]:
        """The statement's parameters for ``rows`` (dicts with at least the ``columns``)."""
        params: list[Any] = []
        encoded, json = self.encoded, self.json
        defaults = [_encode(f.get_default(), f.get_internal_type() == "JSONField", adapt) for f in self.defaults]
        for row in rows:
            params += [
                _encode(row[name], name in json, adapt) if name in encoded else row[name] for name in self.columns
            ]
            params += defaults
        return params

    def instance(self, alias: str, row: dict[str, Any], returned: tuple) -> Any:
        """The model instance of an inserted ``row`` (Python values), with what the INSERT returned."""
        from durableflow.models import Execution

        values = {f.attname: f.get_default() for f in self.defaults}
        values.update((name, row[name]) for name in self.columns)
        values.update(zip(self.returned, map(aware, returned)))
        return Execution.from_db(alias, None, [values.get(name) for name in self.attnames])


def _encode(value: Any, is_json: bool, adapt) -> Any:
    if value is None:
        return None  # SQL NULL, as the ORM writes a JSONField's None
    if is_json:
        return _dumps(value)
    return adapt(value) if isinstance(value, datetime) else value


def decode_claim(row: tuple) -> tuple[dict[str, Any], bool, datetime]:
    """The claimed execution's fields, whether it has step records, and the database clock
    at the claim."""
    count = len(CLAIM_FIELDS)
    fields = dict(zip(CLAIM_FIELDS, row[:count], strict=True))
    for name in ("params", "waiting_for", "cancel_requested", "trace_context"):
        fields[name] = _loads(fields[name])
    return fields, bool(row[count]), aware(row[count + 1])


class _ParsedOnRead:
    """A timestamp slot of a journal row, kept as the driver returned it until first read."""

    def __set_name__(self, owner: type, name: str) -> None:
        self._slot = getattr(StepRecordData, name)

    def __get__(self, row: Any, owner: type | None = None) -> Any:
        if row is None:
            return self
        value = self._slot.__get__(row)
        parsed = aware(value)
        if parsed is not value:
            self._slot.__set__(row, parsed)
        return parsed

    def __set__(self, row: Any, value: Any) -> None:
        self._slot.__set__(row, value)


class JournalRow(StepRecordData):
    """A recorded step as a delivery reads it. A replay reads every record and none of their
    timestamps (only unfinished steps need them), so those are parsed on first access.
    """

    __slots__ = ()
    started_at = _ParsedOnRead()
    finished_at = _ParsedOnRead()


def decode_record(row: tuple) -> StepRecordData:
    # Runs once per recorded step on every delivery: kept plain on purpose.
    key, kind, status, attempts, value, error, meta, started_at, finished_at = row
    return JournalRow(
        key,
        kind,
        status,
        attempts,
        _loads(value),
        _loads(error),
        {} if meta in ("{}", None) else _loads(meta),
        started_at,
        finished_at,
    )


@overload
def aware(value: None) -> None: ...
@overload
def aware(value: datetime | str) -> datetime: ...
def aware(value: Any) -> datetime | None:
    """A UTC-aware datetime from what either driver returns (SQLite: text or naive)."""
    if value is None:
        return None
    if isinstance(value, str):
        # SQLite's text is UTC "YYYY-MM-DD HH:MM:SS[.ffffff]": fromisoformat (C) reads it with
        # its offset in one call. Replays parse two per step; the regex parser is the fallback.
        try:
            return datetime.fromisoformat(value + "+00:00")
        except ValueError:
            value = parse_datetime(value)
    return value if value.tzinfo is not None else value.replace(tzinfo=timezone.utc)


def decode_json(value: Any) -> Any:
    """A JSON column's value as either driver returns it (text, or decoded already)."""
    return _loads(value)


def _dumps(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


_scan = json.JSONDecoder().scan_once  # type: ignore[attr-defined]  # the C scanner, not in the stubs


def _loads(value: Any) -> Any:
    # Django loads jsonb as text (so that JSONField decodes it); SQLite stores text. The text
    # was written by json.dumps or PostgreSQL, so the C scanner reads it directly (json.loads
    # costs about 1 µs more per call: a replay makes one or two calls per recorded step);
    # anything it does not read whole goes through json.loads, which raises as usual.
    if not isinstance(value, (str, bytes)):
        return value
    if type(value) is str:
        try:
            decoded, end = _scan(value, 0)
        except StopIteration:
            pass
        else:
            if end == len(value):
                return decoded
    return json.loads(value)


_statements: dict[tuple[str, str], Statements] = {}


def statements(connection) -> Statements:
    """The statements for ``connection``'s vendor (built once per vendor and table name)."""
    from durableflow.models import Execution

    if connection.vendor not in ("postgresql", "sqlite"):
        raise NotImplementedError(f"durableflow supports PostgreSQL and SQLite, not {connection.vendor}")
    key = (connection.vendor, Execution._meta.db_table)
    if key not in _statements:
        _statements[key] = Statements(connection.vendor, connection.ops.quote_name)
    return _statements[key]


_fenced_inserts: dict[tuple[str, str], str] = {}


def fenced_insert(
    connection, model: Any, fields: tuple[str, ...], casts: dict[str, str], unique: tuple[str, ...]
) -> str:
    """One INSERT of a ``model`` row (``%(field)s`` parameters for ``fields``) that is made only
    while ``%(token)s`` holds the lease of the execution ``%(execution_id)s``, and is left out if
    a row with the same ``unique`` columns exists: a fenced write in one statement, whose row
    count says whether it was made. ``casts`` type the PostgreSQL placeholders (text otherwise):
    the statement may be prepared, and an INSERT ... SELECT does not infer them from its columns.
    Built once per vendor and table."""
    from durableflow.models import Execution

    key = (connection.vendor, model._meta.db_table)
    if key not in _fenced_inserts:
        qn, text = connection.ops.quote_name, "::text" if connection.vendor == "postgresql" else ""
        casts = casts if text else {}

        def column(name: str) -> str:
            return qn(model._meta.get_field(name).column)

        def ec(name: str) -> str:  # an Execution column
            return qn(Execution._meta.get_field(name).column)

        values = ", ".join(f"%({name})s{casts.get(name, text)}" for name in fields)
        _fenced_inserts[key] = (
            f"INSERT INTO {qn(model._meta.db_table)} ({', '.join(column(name) for name in fields)}) "
            f"SELECT {values} WHERE EXISTS (SELECT 1 FROM {qn(Execution._meta.db_table)} "
            f"WHERE {ec('id')} = %(execution_id)s{text} AND {ec('lease_token')} = %(token)s{text}) "
            f"ON CONFLICT ({', '.join(column(name) for name in unique)}) DO NOTHING"
        )
    return _fenced_inserts[key]
