"""The ORM storage's core: executions, the journal, leases and the sweep.

The alias is the one the project's routers give for durableflow's models, so the tables can
live in a second database. The hot path of a delivery (claim, journal read, fenced step
insert, fenced outcome) runs hand-written statements (``durableflow.orm.sql``): one UPDATE ...
RETURNING to claim the lease and read the execution, one SELECT of its journal (skipped
while it has none), one single-statement write per live step and one UPDATE for the
outcome. Everything else goes through the ORM.

Concurrency: every conditional write is one statement whose WHERE clause carries the
condition (the status, the lease token), so two writers racing for a row cannot both match;
the sweep locks the rows it reads (SKIP LOCKED on PostgreSQL; SQLite serialises writers).
"""

from __future__ import annotations

import functools
import time
from contextlib import AbstractContextManager, nullcontext
from datetime import datetime, timedelta
from typing import Any, Callable, Iterable, cast

from django.db import IntegrityError, connections, router, transaction
from django.db.models import DateTimeField, Exists, ExpressionWrapper, OuterRef
from django.db.models.functions import Now

from durableflow import dispatch
from durableflow.conf import df_settings
from durableflow.engine import logs, predicates, tracing
from durableflow.engine.records import RECORD_FIELDS, StepRecordData
from durableflow.engine.states import TERMINAL
from durableflow.engine.storage import ANY, NOW, ClaimRow, LeaseHandle, OutcomeRow
from durableflow.models import Execution, StepRecord, Waiter
from durableflow.orm import backend
from durableflow.orm.leases import Lease, keeper
from durableflow.orm.predicates import to_q
from durableflow.orm.sql import aware, decode_claim, decode_record, statements

__all__ = ["OrmCore", "db_alias"]

_IN_BATCH = 500  # ids per IN (...) list: well under SQLite's variable limit
_BY_ID: dict[tuple, ById] = {}  # (alias, model, fields) -> its read by primary key (see get_execution)
_MAX_PARAMS = 65535  # a PostgreSQL statement's parameters (SQLite's limit is the backend's feature)


def db_alias() -> str:
    """The database alias that holds durableflow's tables (the project's routers decide)."""
    return router.db_for_write(Execution)


logger = logs.logger("durableflow.delivery")

# How long a delivery that finds no execution waits for its row, pause by pause (seconds): a
# start's INSERT was sent before its message, so the row is normally there within a
# millisecond; a second covers a slow commit.
ARRIVAL_PAUSES = (0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.3, 0.3)


class OrmCore:
    """Executions, the journal, leases and the sweep on the models (a part of ``OrmStorage``).

    One instance serves one thread (one delivery, one verb). ``clock_offset`` shifts the
    database clock for this storage's reads and writes (tests move time with it).
    """

    def __init__(self, alias: str | None = None, *, clock_offset: timedelta = timedelta(0)):
        self.alias = alias or db_alias()
        self.offset = clock_offset
        self._cursor = None

    @property
    def connection(self):
        return connections[self.alias]

    def _now(self):
        if not self.offset:
            return Now()
        return ExpressionWrapper(Now() + self.offset, output_field=DateTimeField())

    def _executions(self):
        return Execution.objects.using(self.alias)

    def _steps(self):
        return StepRecord.objects.using(self.alias)

    def _sql(self):
        connection = self.connection
        # One cursor for the storage's life (one delivery): step writes reuse it instead of
        # going through the connection proxy each time; a reconnect gets a new one.
        if (
            self._cursor is None
            or backend.driver(connection) is None
            or self._cursor.cursor.connection is not backend.driver(connection)
        ):
            self._cursor = backend.cursor(connection, prepare=df_settings.PREPARED_STATEMENTS)
        return statements(connection), self._cursor

    def _values(self, values: dict[str, Any]) -> dict[str, Any]:
        return {name: self._now() if value is NOW else value for name, value in values.items()}

    # Transactions, clock and outbox --------------------------------------------------

    def atomic(self) -> AbstractContextManager[Any]:
        return transaction.atomic(using=self.alias)

    def now(self) -> datetime:
        sql, cursor = self._sql()
        cursor.execute(sql.now_sql, {"now": sql.moment(self.offset.total_seconds())})
        return aware(cursor.fetchone()[0])

    def monotonic(self) -> float:
        return time.monotonic()

    def enqueue(self, task: str, args: tuple, queue: str) -> bool:
        headers = tracing.carrier()  # the span that asked for it (a start's), not the one current at the commit
        if backend.in_transaction(self.connection):
            self._publish_on_commit(dispatch.prepare(task, args, queue, headers))
            return True
        return _send(dispatch.send, task, args, queue, headers)

    def _publish_on_commit(self, message: dispatch.Message | None) -> None:
        """Publish ``message`` once the transaction commits, never if it rolls back: it was built
        while the transaction was open, so the publish is all that is left after the commit."""
        if message is not None:
            transaction.on_commit(functools.partial(dispatch.publish, message), using=self.alias)

    def enqueue_many(self, task: str, args_list: list[tuple], queue: str) -> bool:
        if not args_list:
            return True
        headers = tracing.carrier()
        if backend.in_transaction(self.connection):
            transaction.on_commit(lambda: _send(dispatch.send_many, task, args_list, queue, headers), using=self.alias)
            return True
        return _send(dispatch.send_many, task, args_list, queue, headers)

    def after_commit(self, fn: Callable[[], None]) -> None:
        transaction.on_commit(fn, using=self.alias)  # at once outside a transaction

    # Executions -----------------------------------------------------------------------

    def create_execution(self, values: dict[str, Any]) -> Execution | None:
        return self.create_executions([values])[0]

    def create_and_enqueue(self, values: dict[str, Any], task: str, args: tuple, queue: str) -> Execution | None:
        # On PostgreSQL the message is built, and in autocommit published, while the INSERT runs
        # (``durableflow.orm.backend``); inside a transaction it is published while that commits.
        # Anywhere else, once the row is written.
        connection = self.connection
        if not backend.possible(connection):
            execution = self.create_execution(values)
            if execution is not None:
                self.enqueue(task, args, queue)
            return execution
        insert = self._execution_insert(values)  # sent on the driver's connection: no cursor
        params = insert.params([values], connection.ops.adapt_datetimefield_value)
        sql = insert.numbered_sql()
        if not backend.in_transaction(connection):
            rows = backend.run(connection, sql, params, lambda: self.enqueue(task, args, queue))
            return insert.instance(self.alias, values, rows[0][1:]) if rows else None
        headers = tracing.carrier()
        built: list[dispatch.Message | None] = []
        rows = backend.run(connection, sql, params, lambda: built.append(dispatch.prepare(task, args, queue, headers)))
        if not rows:
            return None
        if built[0] is not None:  # published while the caller's COMMIT runs: the delivery waits for its row
            backend.on_commit_sent(connection, functools.partial(dispatch.publish, built[0]))
        return insert.instance(self.alias, values, rows[0][1:])

    def create_executions(self, values_list: list[dict[str, Any]]) -> list[Execution | None]:
        # One hand-written INSERT ... ON CONFLICT DO NOTHING per batch: a taken id or key
        # raises nothing, so neither the caller's transaction nor a savepoint is involved;
        # outside a transaction, a single batch is its own (autocommitted) transaction.
        if not values_list:
            return []
        insert = self._execution_insert(values_list[0])
        adapt = self.connection.ops.adapt_datetimefield_value
        size = max(1, (self.connection.features.max_query_params or _MAX_PARAMS) // insert.width)
        # An INSERT of many rows is not worth preparing.
        cursor = self._sql()[1] if len(values_list) == 1 else backend.cursor(self.connection, prepare=False)
        inserted: dict[str, tuple] = {}
        with nullcontext() if len(values_list) <= size else transaction.atomic(using=self.alias, savepoint=False):
            for start in range(0, len(values_list), size):
                batch = values_list[start : start + size]
                cursor.execute(insert.sql(len(batch)), insert.params(batch, adapt))
                inserted.update((row[0], row[1:]) for row in cursor.fetchall())
        return [
            None if (returned := inserted.get(values["id"])) is None else insert.instance(self.alias, values, returned)
            for values in values_list
        ]

    def _execution_insert(self, values: dict[str, Any]):
        """The INSERT for executions with ``values``' fields (those given as ``NOW`` left to the
        database)."""
        names = tuple(name for name, value in values.items() if value is not NOW)
        return statements(self.connection).execution_insert(names, tuple(name for name in values if values[name] is NOW))

    def get_execution(self, execution_id: str, fields: tuple[str, ...] | None = None) -> Execution | None:
        # Every verb and every wait reads the row by id. Fields left out are deferred: read on access.
        return self._by_id(Execution, execution_id, fields)

    def _by_id(self, model: Any, pk: str, fields: tuple[str, ...] | None = None) -> Any:
        """``model``'s row ``pk`` as an instance (``fields`` only, the rest deferred), or ``None``."""
        reader = _BY_ID.get((self.alias, model, fields))
        if reader is None:
            reader = _BY_ID[(self.alias, model, fields)] = ById(self.connection, model, fields)
        _, cursor = self._sql()
        return reader.read(cursor, self.connection, self.alias, pk)

    def find_execution(self, workflow: str, idempotency_key: str) -> Execution | None:
        return self._executions().filter(workflow=workflow, idempotency_key=idempotency_key).first()

    def update_execution(
        self, execution_id: str, values: dict[str, Any], *, statuses: Iterable[str] | None = None, token: Any = ANY
    ) -> int:
        return self._update("execution", values, {"id": execution_id}, statuses, token)

    def update_executions(
        self, ids: Iterable[str], values: dict[str, Any], *, statuses: Iterable[str] | None = None
    ) -> list[tuple[str, str]]:
        ids, changed = list(ids), []
        with transaction.atomic(using=self.alias):
            for start in range(0, len(ids), _IN_BATCH):
                rows = self._executions().filter(pk__in=ids[start : start + _IN_BATCH]).order_by()
                if statuses is not None:
                    rows = rows.filter(status__in=list(statuses))
                # Lock the matches, then change exactly those: the caller learns which moved.
                matched = list(rows.select_for_update().values_list("pk", "queue"))
                if matched:
                    self._executions().filter(pk__in=[pk for pk, _ in matched]).update(**self._values(values))
                changed += matched
        return changed

    def mark_executions(self, ids: Iterable[str], by_status: dict[str, dict[str, Any]]) -> list[tuple[str, str, str]]:
        ids, changed = list(ids), []
        # Inside the caller's transaction (a publisher's), no savepoint: nothing here is refused.
        with transaction.atomic(using=self.alias, savepoint=False):
            for start in range(0, len(ids), _IN_BATCH):
                rows = self._executions().filter(pk__in=ids[start : start + _IN_BATCH], status__in=list(by_status))
                # Lock them all first: a row cannot change status between the lock and its write.
                matched = list(rows.order_by().select_for_update().values_list("pk", "queue", "status"))
                for status, values in by_status.items():
                    pks = [pk for pk, _, was in matched if was == status]
                    if pks:
                        self._executions().filter(pk__in=pks).update(**self._values(values))
                changed += matched
        return changed

    def execution_ids(self, *, parent_id: str | None = None, statuses: Iterable[str] | None = None) -> list[str]:
        rows = self._executions().order_by()
        if parent_id is not None:
            rows = rows.filter(parent_id=parent_id)
        if statuses is not None:
            rows = rows.filter(status__in=list(statuses))
        return list(rows.values_list("pk", flat=True))

    def _prunable(self):
        # Finished, and no unfinished execution waits for it (that waiter reads its outcome
        # when it replays).
        awaited = Waiter.objects.using(self.alias).filter(kind="child", target=OuterRef("pk"))
        return (
            self._executions()
            .filter(status__in=list(TERMINAL))
            .exclude(Exists(awaited.exclude(execution__status__in=list(TERMINAL))))
            .order_by()
        )

    def prunable(self, before: datetime, limit: int) -> list[str]:
        return list(self._prunable().filter(finished_at__lt=before).values_list("pk", flat=True)[:limit])

    def delete_finished(self, ids: list[str]) -> int:
        deleted = 0
        with transaction.atomic(using=self.alias):
            for start in range(0, len(ids), _IN_BATCH):
                rows = self._prunable().filter(pk__in=ids[start : start + _IN_BATCH])
                # Locked first: a retry() racing with this either comes before (the row is not
                # finished any more, and stays) or waits for the delete.
                locked = list(rows.select_for_update().values_list("pk", flat=True))
                if locked:
                    # The ORM's delete cascades to the journal, waiters, signals and watches.
                    self._executions().filter(pk__in=locked).delete()
                    deleted += len(locked)
        return deleted

    # A delivery -------------------------------------------------------------------------

    def claim(
        self,
        execution_id: str,
        token: str,
        lease_seconds: float,
        *,
        holder: str | None = None,
        take_over: str | None = None,
    ) -> ClaimRow | None:
        row = self._claim(execution_id, token, lease_seconds, holder, take_over)
        if row is None and take_over is None and self._arriving(execution_id):
            row = self._claim(execution_id, token, lease_seconds, holder, take_over)
        return row

    def _claim(self, execution_id, token, lease_seconds, holder, take_over) -> ClaimRow | None:
        sql, cursor = self._sql()
        offset = self.offset.total_seconds()
        cursor.execute(sql.claim_sql, sql.claim_params(execution_id, token, lease_seconds, offset, holder, take_over))
        row = cursor.fetchone()
        if row is None:
            return None
        execution, journaled, db_now = decode_claim(row)
        records = {}
        if journaled:
            cursor.execute(sql.journal_sql, {"id": execution_id})
            records = {record.key: record for record in map(decode_record, cursor.fetchall())}
        return ClaimRow(execution, records, db_now)

    def _arriving(self, execution_id: str) -> bool:
        """After a claim that matched nothing: whether to claim again because the row was not
        there and has arrived since.

        On PostgreSQL a start publishes its delivery while its INSERT commits
        (``create_and_enqueue``), so a delivery may come before its row: it waits for the row a
        little (``ARRIVAL_PAUSES``, about a second in all). A row that is there is claimed
        again at once: it may have been committed just after the first claim (one that is not
        claimable is skipped again, for one statement more). Elsewhere a start writes its row
        before it sends anything: nothing to wait for.
        """
        if self.connection.vendor != "postgresql":
            return False
        executions = self._executions().filter(pk=execution_id)
        if executions.exists():
            return True
        logger.info("delivery early: execution %s is not written yet; waiting for its start", execution_id)
        for pause in ARRIVAL_PAUSES:
            time.sleep(pause)
            if executions.exists():
                return True
        return False  # never written (a start that failed), or deleted since

    def keep_lease(self, execution_id: str, token: str, seconds: float) -> Lease:
        return keeper.hold(execution_id, token, seconds, self.offset, alias=self.alias)

    def release_lease(self, handle: LeaseHandle) -> None:
        keeper.release(cast(Lease, handle))  # one keep_lease returned

    def holds_lease(self, execution_id: str, token: str) -> bool:
        return self._executions().filter(pk=execution_id, lease_token=token).exists()

    def insert_step(self, execution_id: str, token: str, record: StepRecordData) -> bool:
        sql, cursor = self._sql()
        cursor.execute(
            sql.insert_sql,
            sql.insert_params(record, execution_id, token, self.connection.ops.adapt_datetimefield_value),
        )
        return cursor.rowcount == 1

    def update_step(
        self,
        execution_id: str,
        key: str,
        values: dict[str, Any],
        *,
        token: Any = ANY,
        statuses: Iterable[str] | None = None,
    ) -> int:
        return self._update("step", values, {"execution_id": execution_id, "key": key}, statuses, token)

    def _update(self, table: str, values: dict[str, Any], row: dict[str, str], statuses, token) -> int:
        # One hand-written UPDATE per shape (prepared on PostgreSQL): the ORM's update() spent
        # about three times the statement's own time compiling it, on every call.
        sql, cursor = self._sql()
        adapt = self.connection.ops.adapt_datetimefield_value
        query, params = sql.update(
            table, values, row, adapt, offset=self.offset.total_seconds(), token=token, statuses=statuses
        )
        cursor.execute(query, params)
        return cursor.rowcount

    def insert_steps(self, execution_id: str, token: str, records: list[StepRecordData]) -> bool:
        with transaction.atomic(using=self.alias):
            # Lock the execution while its lease is ours: no claim can take it until this commits.
            if not self._executions().filter(pk=execution_id, lease_token=token).select_for_update().exists():
                return False
            try:
                with transaction.atomic(using=self.alias):
                    self._steps().bulk_create(
                        [StepRecord(execution_id=execution_id, **_record_fields(record)) for record in records]
                    )
            except IntegrityError:
                return False
        return True

    def record_outcome(
        self, execution_id: str, token: str, values: dict[str, Any], *, if_woken: dict[str, Any] | None = None
    ) -> OutcomeRow | None:
        # The prepared, fenced statement of the hot path: one UPDATE ... RETURNING. A wake-up
        # that arrived while the lease was held makes the first UPDATE match nothing; the second
        # tells a lost lease from it.
        sql, cursor = self._sql()
        adapt = self.connection.ops.adapt_datetimefield_value
        query, params = sql.outcome(values, execution_id, token, adapt, unless_woken=if_woken is not None)
        cursor.execute(query, params)
        row = cursor.fetchone()
        if row is not None or if_woken is None:
            return None if row is None else OutcomeRow(watched=bool(row[0]))
        query, params = sql.outcome(if_woken, execution_id, token, adapt)
        cursor.execute(query, params)
        row = cursor.fetchone()
        return None if row is None else OutcomeRow(watched=bool(row[0]), woken=True)

    def get_step(self, execution_id: str, key: str) -> StepRecordData | None:
        values = self._steps().filter(execution_id=execution_id, key=key).values(*RECORD_FIELDS).first()
        return None if values is None else StepRecordData(**values)

    def steps(self, execution_id: str) -> list[StepRecordData]:
        rows = self._steps().filter(execution_id=execution_id).order_by("id").values(*RECORD_FIELDS)
        return [StepRecordData(**values) for values in rows]

    def complete_steps(
        self, pairs: Iterable[tuple[str, str]], values: dict[str, Any], *, kind: str, statuses: Iterable[str]
    ) -> int:
        # Candidates by execution, then the exact pairs in Python: OR-ing pairs in SQL hits
        # SQLite's expression-depth limit around 500 of them.
        wanted = set(pairs)
        ids = sorted({pk for pk, _ in wanted})
        matched: list[int] = []
        for start in range(0, len(ids), _IN_BATCH):
            candidates = self._steps().filter(
                execution_id__in=ids[start : start + _IN_BATCH], kind=kind, status__in=list(statuses)
            )
            matched += [
                pk for pk, ex, key in candidates.values_list("pk", "execution_id", "key") if (ex, key) in wanted
            ]
        count = 0
        for start in range(0, len(matched), _IN_BATCH):
            count += self._steps().filter(pk__in=matched[start : start + _IN_BATCH]).update(**self._values(values))
        return count

    # The sweep --------------------------------------------------------------------------

    def lock_due(self, limit: int) -> list[tuple[str, str, dict[str, Any] | None]]:
        rows = self._executions().due(self._now()).order_by("wake_at").select_for_update(skip_locked=True)
        return list(rows.values_list("id", "queue", "waiting_for")[:limit])

    def lock_stale(self, redeliver_after: float, limit: int) -> list[tuple[str, str]]:
        rows = (
            self._executions()
            .stale(redeliver_after, self._now())
            .order_by("enqueued_at")
            .select_for_update(skip_locked=True)
        )
        return list(rows.values_list("id", "queue")[:limit])

    def lock_overdue(self, limit: int) -> list[tuple[str, datetime]]:
        rows = (
            self._executions()
            .filter(to_q(predicates.OVERDUE, self._now()))
            .order_by("deadline_at")
            .select_for_update(skip_locked=True)
        )
        return list(rows.values_list("id", "deadline_at")[:limit])

    def leased_on(self, host: str, limit: int) -> list[tuple[str, str, str, str]]:
        rows = self._executions().filter(to_q(predicates.LEASE_LIVE, self._now()), lease_holder__startswith=f"{host} ")
        return list(rows.order_by().values_list("id", "queue", "lease_token", "lease_holder")[:limit])


class ById:
    """One model's SELECT by primary key, written once per (alias, model, fields), run on the
    storage's cursor (so prepared on PostgreSQL) and decoded by the fields' own converters, as
    the ORM decodes a row: about a third of what ``filter(pk=...).first()`` costs, each time.
    """

    def __init__(self, connection, model: Any, fields: tuple[str, ...] | None) -> None:
        meta = model._meta
        wanted = None if fields is None else {meta.get_field(name).attname for name in fields} | {meta.pk.attname}
        # In the model's field order: what ``from_db`` expects of a row with deferred fields.
        self.fields = [field for field in meta.concrete_fields if wanted is None or field.attname in wanted]
        self.attnames = None if wanted is None else [field.attname for field in self.fields]
        qn = connection.ops.quote_name
        text = "::text" if connection.vendor == "postgresql" else ""
        self.sql = (
            f"SELECT {', '.join(qn(field.column) for field in self.fields)} FROM {qn(meta.db_table)} "
            f"WHERE {qn(meta.pk.column)} = %(pk)s{text}"
        )
        self.converters = []
        for index, field in enumerate(self.fields):
            column = field.get_col(meta.db_table)
            converters = backend.db_converters(connection, column)
            if converters:
                self.converters.append((index, converters, column))
        self.model = model

    def read(self, cursor, connection, alias: str, pk: str) -> Any:
        cursor.execute(self.sql, {"pk": pk})
        row = cursor.fetchone()
        if row is None:
            return None
        values = list(row)
        for index, converters, column in self.converters:
            value = values[index]
            for convert in converters:
                value = convert(value, column, connection)
            values[index] = value
        return self.model.from_db(alias, self.attnames, values)


def _record_fields(record: StepRecordData) -> dict[str, Any]:
    return {name: getattr(record, name) for name in RECORD_FIELDS}


def _send(send: Callable[..., bool], task: str, args: Any, queue: str, headers: dict[str, str] | None) -> bool:
    """``send(task, args, queue)``, with the message headers of a traced enqueue if there are any."""
    return send(task, args, queue) if headers is None else send(task, args, queue, headers)
