"""The ORM storage's step bodies run as their own tasks (map items, run(queue=)).

An item is a journal record (kind ``item``) written by the delivery that fans out, then
claimed and finished by item tasks. Its ``attempts`` count is the fence: a claim increments
it, and only the attempt that claimed last may record the outcome.

An item task's two writes are hand-written statements, one text per vendor and shape (prepared
on PostgreSQL, as ``durableflow.orm.sql``'s hot path): the claim, one UPDATE ... RETURNING
(the ORM's was a transaction of an UPDATE and a SELECT), and the outcome (``record_item``); on
PostgreSQL neither waits for the disk (``record_sql`` says why that is safe). On
PostgreSQL the outcome is one statement: the item's UPDATE, the count off its step's record
and, for the last item, the execution's wake-up, as three UPDATEs chained in a WITH. Its
concurrency story: each UPDATE locks its row, and an UPDATE that waited for a row lock
evaluates its condition and its SET again on the newest version of the row, so items finishing
at the same time count down one after the other from what the previous one committed, and the
wake-up moves the execution from the status it has when its row is locked. (A count of the
unfinished items in the same statement would read the statement's snapshot: two items finishing
at once could each see the other unfinished, and nobody would wake the execution.) On SQLite,
whose writers are serialised, the same three UPDATEs run in one transaction.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.db import transaction

from durableflow.engine.predicates import ITEM_CLAIMABLE, In
from durableflow.engine.states import RUNNABLE, STEP_UNFINISHED, StepStatus
from durableflow.engine.storage import LEFT, NOW, ItemRecorded
from durableflow.orm.core import OrmCore
from durableflow.orm.predicates import to_sql
from durableflow.orm.sql import ASYNC_COMMIT, Statements, decode_json

__all__ = ["OrmItems", "ItemStatements", "item_statements"]

ITEM = "item"
_UNFINISHED = sorted(STEP_UNFINISHED)


class OrmItems(OrmCore):
    """Item records on the models (a part of ``OrmStorage``)."""

    def _items(self, execution_id: str | None = None):
        rows = self._steps().filter(kind=ITEM)
        return rows if execution_id is None else rows.filter(execution_id=execution_id)

    def claim_item(self, execution_id: str, key: str, lease_seconds: float) -> tuple[int, dict[str, Any]] | None:
        sql, cursor = self._sql()
        items = item_statements(sql)
        offset = self.offset.total_seconds()
        cursor.execute(items.claim_sql, items.claim_params(execution_id, key, lease_seconds, offset))
        row = cursor.fetchone()
        return None if row is None else (row[0], decode_json(row[1]) or {})

    def record_item(
        self,
        execution_id: str,
        key: str,
        attempt: int,
        fields: dict[str, Any],
        *,
        step: str,
        wake: dict[str, dict[str, Any]],
    ) -> ItemRecorded | None:
        sql, cursor = self._sql()
        items = item_statements(sql)
        adapt = self.connection.ops.adapt_datetimefield_value
        params = items.record_params(execution_id, key, attempt, fields, step, wake, adapt, self.offset.total_seconds())
        if items.vendor == "postgresql":
            cursor.execute(items.record_sql(fields, wake), params)
            finished, left, queue, status, _ = cursor.fetchone()
        else:  # SQLite: the same three UPDATEs in one transaction (its writers are serialised)
            with transaction.atomic(using=self.alias, savepoint=False):
                finish, count, woken = items.record_steps(fields, wake)
                cursor.execute(finish, params)
                finished = cursor.rowcount
                left = queue = status = None
                if finished:
                    cursor.execute(count, params)
                    row = cursor.fetchone()
                    left = None if row is None else row[0]
                if left == 0:
                    cursor.execute(woken, params)
                    queue, status = cursor.fetchone() or (None, None)
        if not finished:
            return None
        return ItemRecorded(left, None if status is None else (queue, items.had(wake, status)))

    def finish_item(self, execution_id: str, key: str, attempt: int, values: dict[str, Any]) -> bool:
        rows = self._items(execution_id).filter(key=key, status=StepStatus.RUNNING, attempts=attempt)
        return bool(rows.update(**self._values(values)))

    def send_next_item(self, execution_id: str) -> tuple[str, str] | None:
        unsent = self._items(execution_id).filter(status=StepStatus.WAITING, started_at__isnull=True).order_by("id")
        # Two finishing items may pick the same one: the conditional UPDATE gives it to one.
        for pk, key, meta in unsent.values_list("pk", "key", "meta")[:4]:
            if self._steps().filter(pk=pk, started_at__isnull=True).update(started_at=self._now()):
                return key, (meta or {}).get("queue", "")
        return None

    def items_left(self, execution_id: str) -> int:
        return self._items(execution_id).filter(status__in=_UNFINISHED).count()

    def lock_stale_items(self, resend_after: float, limit: int) -> list[tuple[str, str, str]]:
        overdue = self._now() - timedelta(seconds=resend_after)
        with transaction.atomic(using=self.alias):
            rows = (
                self._items()
                .filter(status__in=_UNFINISHED, started_at__lt=overdue, execution__status__in=list(RUNNABLE))
                .order_by("started_at")
                .select_for_update(skip_locked=True, of=("self",))
            )
            stale = list(rows.values_list("pk", "execution_id", "key", "meta")[:limit])
            if stale:
                self._steps().filter(pk__in=[pk for pk, *_ in stale]).update(
                    status=StepStatus.WAITING, started_at=self._now()
                )
        return [(execution_id, key, (meta or {}).get("queue", "")) for _, execution_id, key, meta in stale]


class ItemStatements:
    """An item task's statements for one vendor: its claim, and its outcome counted off its
    step's record (``record_sql`` on PostgreSQL, ``record_steps`` on SQLite), one text per
    shape of the outcome's fields and of the wake-up's moves."""

    def __init__(self, sql: Statements) -> None:
        self.vendor = sql.vendor
        self.sql = sql
        postgresql = sql.vendor == "postgresql"
        step, execution = sql.table("step"), sql.table("execution")

        def sc(name: str) -> str:
            return sql.column("step", name)

        def ec(name: str) -> str:
            return sql.column("execution", name)

        self._sc, self._ec, self._step, self._execution = sc, ec, step, execution
        now = sql.moment_sql("now")
        claimable = to_sql(ITEM_CLAIMABLE, sc, now, sql.param, lambda name: sql.moment_sql(f"ago_{name}"))
        unfinished = to_sql(In("status", RUNNABLE), ec, now, sql.param)
        # The execution's row is read, not locked: a cancel that commits meanwhile ends the item
        # (cancel gives it its outcome first), and one that comes later refuses its outcome.
        self.claim_sql = (
            f"UPDATE {step} SET {sc('status')} = '{StepStatus.RUNNING}', {sc('attempts')} = {sc('attempts')} + 1, "
            f"{sc('started_at')} = {now} "
            f"WHERE {self._this_item('key')} AND {sc('kind')} = '{ITEM}' AND {claimable} "
            f"AND EXISTS (SELECT 1 FROM {execution} WHERE {ec('id')} = {sql.param('id')} AND {unfinished}) "
            f"RETURNING {sc('attempts')}, {sc('meta')}"
            # As a delivery's claim: nothing acts on an item's claim but its own outcome (see
            # ``record_sql`` for what makes that durable, the claim with it); a claim lost with
            # the server leaves the item as it was, its outcome is refused as stale and the sweep
            # sends it again.
            f"{ASYNC_COMMIT if postgresql else ''}"
        )
        if postgresql:
            left = f"({sc('meta')} ->> '{LEFT}')::integer"
            counted = f"jsonb_set({sc('meta')}, '{{{LEFT}}}', to_jsonb({left} - 1))"
        else:
            left = f"json_extract({sc('meta')}, '$.{LEFT}')"
            counted = f"json_set({sc('meta')}, '$.{LEFT}', {left} - 1)"
        self._count = (
            f"UPDATE {step} SET {sc('meta')} = {counted} WHERE {self._this_item('step')} AND {left} > 0"
            f"{' AND EXISTS (SELECT FROM finished)' if postgresql else ''} RETURNING {left}"
            f"{' AS items_left' if postgresql else ''}"
        )
        self._shapes: dict[tuple, Any] = {}

    def _this_item(self, key: str) -> str:
        """The condition on the step record of this execution whose key is parameter ``key``."""
        return f"{self._sc('execution')} = {self.sql.param('id')} AND {self._sc('key')} = {self.sql.param(key)}"

    def claim_params(self, execution_id: str, key: str, lease_seconds: float, offset: float) -> dict[str, Any]:
        sql = self.sql
        return {
            "id": execution_id,
            "key": key,
            "now": sql.moment(offset),
            "ago_lease_seconds": sql.moment(offset - lease_seconds),
        }

    def record_params(self, execution_id, key, attempt, fields, step, wake, adapt, offset: float) -> dict[str, Any]:
        params = {"id": execution_id, "key": key, "attempt": attempt, "step": step, "now": self.sql.moment(offset)}
        params.update(self.sql.assigned("step", fields, adapt))
        for number, (status, moves) in enumerate(sorted(wake.items())):
            params[f"w{number}"] = status
            params.update(
                {f"w{number}_{name}": value for name, value in self.sql.assigned("execution", moves, adapt).items()}
            )
        return params

    def record_steps(self, fields: dict[str, Any], wake: dict[str, dict[str, Any]]) -> tuple[str, str, str]:
        """The outcome's three UPDATEs: the item's (fenced by its attempt), the count off its step's
        record (returning what is left) and the execution's wake-up (returning its queue and
        new status)."""
        shape = _shape(fields, wake)
        found = self._shapes.get(shape)
        if found is None:
            found = self._shapes[shape] = self._build(fields, wake)
        return found

    def record_sql(self, fields: dict[str, Any], wake: dict[str, dict[str, Any]]) -> str:
        """PostgreSQL: ``record_steps`` in one statement, answering (items recorded: 0 or 1, what
        is left or NULL, the execution's queue and new status or NULLs)."""
        shape = ("one statement", _shape(fields, wake))
        found = self._shapes.get(shape)
        if found is not None:
            return found
        finish, count, woken = self.record_steps(fields, wake)
        found = self._shapes[shape] = (
            f"WITH finished AS ({finish} RETURNING 1), counted AS ({count}), woken AS ({woken}) "
            "SELECT (SELECT COUNT(*) FROM finished), (SELECT items_left FROM counted), "
            f"(SELECT {self._ec('queue')} FROM woken), (SELECT {self._ec('status')} FROM woken)"
            # Committed without waiting for the disk, as the claim. An item's outcome is acted on
            # only by its execution's next delivery, which records the step (the map, the run)
            # before its workflow code sees any item's value; that write waits for the disk, and
            # with it everything written before it, every item's outcome included. An outcome
            # lost with the server before then leaves its item unfinished under an old attempt
            # (or its claim lost too: as sent), and the sweep sends it again; the count and the
            # wake-up were in its transaction, so they are lost with it and made again by it.
            f"{ASYNC_COMMIT}"
        )
        return found

    def _build(self, fields: dict[str, Any], wake: dict[str, dict[str, Any]]) -> tuple[str, str, str]:
        sql, sc, ec = self.sql, self._sc, self._ec
        names = tuple(sorted(fields))
        assignments = sql.assignments("step", names, frozenset(name for name in names if fields[name] is NOW))
        finish = (
            f"UPDATE {self._step} SET {assignments} WHERE {self._this_item('key')} "
            f"AND {sc('status')} = '{StepStatus.RUNNING}' AND {sc('attempts')} = %(attempt)s"
            f"{'::integer' if self.vendor == 'postgresql' else ''}"
        )
        moves = sorted(wake.items())
        # One CASE per field a move writes, on the status the row had (SET reads the old row).
        changed = sorted({name for _, values in moves for name in values})
        cases = []
        for name in changed:
            whens = " ".join(
                f"WHEN %(w{number})s THEN {self._move_value(number, name, values[name])}"
                for number, (_, values) in enumerate(moves)
                if name in values
            )
            cases.append(f"{ec(name)} = CASE {ec('status')} {whens} ELSE {ec(name)} END")
        sources = ", ".join(f"%(w{number})s" for number in range(len(moves)))
        last = " AND EXISTS (SELECT FROM counted WHERE items_left = 0)" if self.vendor == "postgresql" else ""
        woken = (
            f"UPDATE {self._execution} SET {', '.join(cases)} "
            f"WHERE {ec('id')} = {sql.param('id')} AND {ec('status')} IN ({sources}){last} "
            f"RETURNING {ec('queue')}, {ec('status')}"
        )
        return finish, self._count, woken

    def _move_value(self, number: int, name: str, value: Any) -> str:
        return self.sql.moment_sql("now") if value is NOW else self.sql.placeholder(name, f"w{number}_v_{name}")

    def hot_path(self) -> dict[str, str]:
        """An item task's statements, by name, as this vendor runs them for a completed item: its
        claim, and its outcome (one statement on PostgreSQL; three in one transaction on SQLite).
        Written out in ``durableflow/orm/statements/<vendor>-items.sql`` (``tests/orm/test_sql_text.py``)."""
        from durableflow.engine.steering import wake_moves

        fields = {"status": StepStatus.COMPLETED, "value": None, "finished_at": NOW}
        if self.vendor == "postgresql":
            return {"claim_item": self.claim_sql, "record_item": self.record_sql(fields, wake_moves())}
        finish, count, woken = self.record_steps(fields, wake_moves())
        return {"claim_item": self.claim_sql, "finish_item": finish, "count_item": count, "wake": woken}

    @staticmethod
    def had(wake: dict[str, dict[str, Any]], status: str) -> str:
        """The status an execution had, from the one a wake-up's moves gave it."""
        return _sources(wake)[status]


def _sources(wake: dict[str, dict[str, Any]]) -> dict[str, str]:
    """New status -> the status it was moved from (each move must give a different one)."""
    sources = {moves.get("status", status): status for status, moves in wake.items()}
    if len(sources) != len(wake):
        raise ValueError("a wake-up's moves must leave each status they move from a different status")
    return sources


def _shape(fields: dict[str, Any], wake: dict[str, dict[str, Any]]) -> tuple:
    def of(values: dict[str, Any]) -> tuple:
        return tuple(sorted((name, values[name] is NOW) for name in values))

    return of(fields), tuple(sorted((status, of(moves)) for status, moves in wake.items()))


_item_statements: dict[tuple[str, str], ItemStatements] = {}


def item_statements(sql: Statements) -> ItemStatements:
    """The item statements beside ``sql`` (a vendor's ``Statements``), built once per vendor and table."""
    key = (sql.vendor, sql.table("step"))
    found = _item_statements.get(key)
    if found is None:
        found = _item_statements[key] = ItemStatements(sql)
    return found
