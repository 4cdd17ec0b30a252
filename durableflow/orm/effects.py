"""The ORM storage's effects: ``Effect`` rows and the watches of executions waiting on them.

An effect step writes three or four times (begin, hold, settle, and the step record), so its
statements are written by hand like the rest of a delivery's (``durableflow.orm.sql``): each is
one statement, compiled once per vendor and set of columns. Rare ones go through the ORM.

Concurrency: each conditional write is one statement whose WHERE clause carries the
condition (the effect's status, its holder, the live lease of the delivery), so two
deliveries racing for one effect cannot both match; a new effect is an INSERT ... ON
CONFLICT DO NOTHING that exactly one of them wins, without an error in anyone's transaction.
"""

from __future__ import annotations

import json
from typing import Any, Iterable

from durableflow.engine.effects import EffectStatus
from durableflow.engine.storage import ANY, NOW
from durableflow.models import Effect, EffectWatch, Execution
from durableflow.orm.core import OrmCore

__all__ = ["OrmEffects"]

_JSON = frozenset({"input", "result"})


class OrmEffects(OrmCore):
    """Effects on the models (a part of ``OrmStorage``)."""

    def _effect_sql(self):
        sql, cursor = self._sql()
        return _statements(self.connection, sql), sql.moment(self.offset.total_seconds()), cursor

    def create_effect(self, values: dict[str, Any]) -> bool:
        statements, now, cursor = self._effect_sql()
        query, params = statements.insert(values, self.connection.ops.adapt_datetimefield_value)
        cursor.execute(query, {**params, "now": now})
        return cursor.rowcount == 1  # 0: the id is taken (ON CONFLICT DO NOTHING)

    def get_effect(self, effect_id: str) -> Effect | None:
        return self._by_id(Effect, effect_id)

    def update_effect(
        self,
        effect_id: str,
        values: dict[str, Any],
        *,
        statuses: Iterable[str] | None = None,
        holder_token: Any = ANY,
    ) -> int:
        statements, now, cursor = self._effect_sql()
        statuses = None if statuses is None else tuple(sorted(statuses))
        query, params = statements.update(
            values, statuses, holder_token is not ANY, self.connection.ops.adapt_datetimefield_value
        )
        params.update(now=now, fence_id=effect_id)
        if holder_token is not ANY:
            params["fence_holder"] = holder_token
        cursor.execute(query, params)
        return cursor.rowcount

    def hold_effect(self, effect_id: str, execution_id: str, token: str) -> int:
        statements, now, cursor = self._effect_sql()
        cursor.execute(statements.hold_sql, {"id": effect_id, "execution": execution_id, "token": token, "now": now})
        return cursor.rowcount

    def add_effect_watch(self, effect_id: str, execution_id: str, step_key: str) -> None:
        EffectWatch.objects.using(self.alias).bulk_create(
            [EffectWatch(effect_id=effect_id, execution_id=execution_id, step_key=step_key)], ignore_conflicts=True
        )

    def pop_effect_watches(self, effect_id: str) -> list[str]:
        statements, _, cursor = self._effect_sql()
        cursor.execute(statements.watches_sql, {"id": effect_id})
        found = cursor.fetchall()
        if not found:
            return []
        EffectWatch.objects.using(self.alias).filter(pk__in=[pk for pk, _ in found]).delete()
        return list(dict.fromkeys(execution_id for _, execution_id in found))


class EffectStatements:
    """The effect statements for one vendor (the clock expression and casts of ``durableflow.orm.sql``)."""

    def __init__(self, connection, sql) -> None:
        qn = connection.ops.quote_name
        self.postgres = connection.vendor == "postgresql"
        self.text = "::text" if self.postgres else ""
        self.now = sql.moment_sql("now")
        self.table = effect = qn(Effect._meta.db_table)
        execution = qn(Execution._meta.db_table)

        def fc(name: str) -> str:  # an Effect column
            return qn(Effect._meta.get_field(name).column)

        def ec(name: str) -> str:  # an Execution column
            return qn(Execution._meta.get_field(name).column)

        self.fc = fc

        now, text = self.now, self.text
        # The hold: pending, this delivery's lease held and unexpired, and no other live
        # lease on the effect (its holder's token is gone or expired).
        self.hold_sql = (
            f"UPDATE {effect} SET {fc('holder_id')} = %(execution)s{text}, {fc('holder_token')} = %(token)s{text}, "
            f"{fc('attempts')} = {fc('attempts')} + 1, {fc('updated_at')} = {now} "
            f"WHERE {fc('id')} = %(id)s{text} AND {fc('status')} = '{EffectStatus.PENDING}' "
            f"AND EXISTS (SELECT 1 FROM {execution} WHERE {ec('id')} = %(execution)s{text} "
            f"AND {ec('lease_token')} = %(token)s{text} AND {ec('lease_expires_at')} > {now}) "
            f"AND ({fc('holder_token')} IS NULL OR {fc('holder_token')} = %(token)s{text} "
            f"OR NOT EXISTS (SELECT 1 FROM {execution} WHERE {ec('id')} = {effect}.{fc('holder_id')} "
            f"AND {ec('lease_token')} = {effect}.{fc('holder_token')} AND {ec('lease_expires_at')} > {now}))"
        )
        watch = EffectWatch._meta
        self.watches_sql = (
            f"SELECT {qn(watch.pk.column)}, {qn(watch.get_field('execution').column)} FROM {qn(watch.db_table)} "
            f"WHERE {qn(watch.get_field('effect').column)} = %(id)s{text}"
        )
        self._insert: dict[tuple, str] = {}
        self._update: dict[tuple, str] = {}

    def _value(self, name: str) -> str:
        if not self.postgres:
            return f"%({name})s"
        return f"%({name})s{'::jsonb' if name in _JSON else '::timestamptz' if name.endswith('_at') else ''}"

    def _params(self, values: dict[str, Any], adapt) -> dict[str, Any]:
        params = {}
        for name, value in values.items():
            if value is NOW:
                continue
            if name in _JSON:
                value = None if value is None else json.dumps(value, separators=(",", ":"), ensure_ascii=False)
            elif name.endswith("_at") and value is not None:
                value = adapt(value)
            params[name] = value
        return params

    def insert(self, values: dict[str, Any], adapt) -> tuple[str, dict[str, Any]]:
        names = tuple(sorted(values))
        key = (names, tuple(n for n in names if values[n] is NOW))
        sql = self._insert.get(key)
        if sql is None:
            columns = ", ".join(self.fc(name) for name in names)
            placeholders = ", ".join(self.now if values[name] is NOW else self._value(name) for name in names)
            sql = self._insert[key] = (
                f"INSERT INTO {self.table} ({columns}) VALUES ({placeholders}) ON CONFLICT ({self.fc('id')}) DO NOTHING"
            )
        return sql, self._params(values, adapt)

    def update(
        self, values: dict[str, Any], statuses: tuple[str, ...] | None, by_holder: bool, adapt
    ) -> tuple[str, dict[str, Any]]:
        names = tuple(sorted(values))
        key = (names, tuple(n for n in names if values[n] is NOW), statuses, by_holder)
        sql = self._update.get(key)
        if sql is None:
            fc, text = self.fc, self.text
            assignments = ", ".join(
                f"{fc(name)} = {self.now if values[name] is NOW else self._value(name)}" for name in names
            )
            sql = f"UPDATE {self.table} SET {assignments} WHERE {fc('id')} = %(fence_id)s{text}"
            if statuses is not None:
                quoted = ", ".join(f"'{status}'" for status in statuses)
                sql += f" AND {fc('status')} IN ({quoted})"
            if by_holder:
                sql += f" AND {fc('holder_token')} = %(fence_holder)s{text}"
            self._update[key] = sql
        return sql, self._params(values, adapt)


_built: dict[tuple[str, str, str], EffectStatements] = {}


def _statements(connection, sql) -> EffectStatements:
    key = (connection.vendor, Effect._meta.db_table, Execution._meta.db_table)
    if key not in _built:
        _built[key] = EffectStatements(connection, sql)
    return _built[key]
