"""``satisfy_waits`` on PostgreSQL: an event stored, matched, taken, settled and woken in one round trip.

Two statements sent together in one pipeline (one transaction, one round trip; inside a caller's
transaction, part of it): the advisory lock its waiters' registrars take (``lock_waits``), then one
statement of CTEs that a new snapshot, taken once the lock is held, makes see every waiter
registered before. The second statement, in order:

- ``owner``: the execution the event belongs to (a signal's addressee, a token's owner), by the
  rule of ``storage.Owner``;
- ``event``: the INSERT, left out for a repeated (kind, event_id) or without an owner;
- ``open``: the open waiters of (kind, target), the earliest of each execution, whose ``match`` the
  payload contains (``@>``, which is exactly ``waits.contains`` for a match without arrays; a
  waiter whose match holds an array is ``unsure`` and left to the engine);
- ``taken``: those waiters satisfied with the event (a conditional UPDATE: still open);
- ``settled``: the step records of those that ``settle``, completed while they are waiting;
- ``locked`` / ``moved``: their executions locked in id order (two publishers lock in the same
  order) and moved by the engine's ``moves``, returning the status each had.

Each statement is prepared once per connection, one text per shape (with or without an event or
an owner, the fields moved and settled, and what the owner's rule fixes for a verb: written into
the text rather than passed, so that PostgreSQL keeps the statement's generic plan).
"""

from __future__ import annotations

import json
from typing import Any, Callable

from durableflow.engine.states import StepStatus, WaiterStatus
from durableflow.engine.storage import NOW, Owner, Satisfaction, Satisfied

__all__ = ["SatisfyStatements", "LOCK_CLASS", "lock_sql"]

W = WaiterStatus

# The first half of the advisory lock's two-integer key: "DFWT", so that durableflow's locks do
# not meet a project's own (nor the rate limits' "DFRL").
LOCK_CLASS = 0x44465754

lock_sql = "SELECT pg_advisory_xact_lock(%(lock_class)s::integer, hashtext(%(lock_kind)s::text || ' ' || %(lock)s::text))"

# A match that holds an array somewhere: ``@>`` is looser than ``waits.contains`` for those.
_UNSURE = "jsonb_path_exists({}, 'strict $.** ? (@.type() == \"array\")')"

# The types of the settled record's columns (typed placeholders: the statement is prepared).
_RECORD_CASTS = {"attempts": "::integer", "value": "::jsonb", "error": "::jsonb", "finished_at": "::timestamptz"}
_EXECUTION_CASTS = {"wake_at": "::timestamptz", "enqueued_at": "::timestamptz", "wake_pending": "::boolean"}


class SatisfyStatements:
    """The statements of ``satisfy_waits`` on one PostgreSQL database (table names from the models)."""

    def __init__(self, qn: Callable[[str], str], moment: str) -> None:
        from durableflow.models import Event, Execution, StepRecord, Waiter

        def columns(model: Any) -> Callable[[str], str]:
            return lambda name: qn(model._meta.get_field(name).column)

        self.ec, self.sc, self.wc, self.vc = columns(Execution), columns(StepRecord), columns(Waiter), columns(Event)
        self.execution, self.step = qn(Execution._meta.db_table), qn(StepRecord._meta.db_table)
        self.waiter, self.events = qn(Waiter._meta.db_table), qn(Event._meta.db_table)
        self.now = moment
        self._built: dict[tuple, str] = {}

    def statement(self, request: Satisfaction) -> tuple[str, dict[str, Any]]:
        """The CTE statement for ``request`` (sent after ``lock_sql``) and the parameters of both."""
        moves = request.moves
        moved = tuple(sorted({name for fields in moves.values() for name in fields}))
        settled = tuple(sorted(request.settle))
        shape = (
            request.event is not None,
            None if request.owner is None else _owner_shape(request.owner),
            tuple(sorted(moves)),
            moved,
            tuple(name for name in settled if request.settle[name] is NOW),
            settled,
            tuple((status, name, fields[name] is NOW) for status, fields in sorted(moves.items()) for name in fields),
        )
        sql = self._built.get(shape)
        if sql is None:
            sql = self._built[shape] = self._build(request, moved, settled)
        return sql, self._params(request, moved, settled)

    def _params(self, request: Satisfaction, moved: tuple[str, ...], settled: tuple[str, ...]) -> dict[str, Any]:
        params: dict[str, Any] = {
            "lock_class": LOCK_CLASS,
            "lock_kind": request.kind,
            "lock": request.lock,
            "kind": request.kind,
            "target": request.target,
            "now": 0.0,
        }
        if request.event is not None:
            params["event_id"] = request.event["event_id"]
            params["payload"] = _json(request.payload)
        owner = request.owner
        if owner is not None:
            if not _listed(owner):
                params["ids"] = [execution_id for execution_id, _ in owner.candidates]
                params["keys"] = [key for _, key in owner.candidates]
            else:
                for n, (execution_id, key) in enumerate(owner.candidates):
                    params[f"id{n}"] = execution_id
                    if key is not None:
                        params[f"key{n}"] = key
        for name in settled:
            value = request.settle[name]
            if value is NOW:
                continue
            if name == "meta":
                params["s_meta"] = json.dumps(value or {}, separators=(",", ":"), ensure_ascii=False)
            elif name in ("value", "error"):
                params[f"s_{name}"] = _json(value)
            else:
                params[f"s_{name}"] = value
        for status, fields in sorted(request.moves.items()):
            for name, value in fields.items():
                if value is not NOW:
                    params[f"m_{status}_{name}"] = value
        return params

    def _build(self, request: Satisfaction, moved: tuple[str, ...], settled: tuple[str, ...]) -> str:
        ec, sc, wc, vc, now = self.ec, self.sc, self.wc, self.vc, self.now
        with_event, owner = request.event is not None, request.owner
        parts = []
        if owner is not None:
            # The open waiter's execution (if ``waiting``), else the first candidate: COALESCE reads
            # the candidates only when there is no such waiter. What is the same for every call of
            # a verb (``waiting``, the statuses, how many candidates and which name a key) is
            # written into the text, so that the prepared statement's generic plan costs what a
            # custom one does: PostgreSQL would otherwise plan it again at every call (0.7 ms once
            # the tables have grown).
            if not _listed(owner):
                candidates = "unnest(%(ids)s::text[], %(keys)s::text[]) WITH ORDINALITY AS c(id, key, n)"
            else:
                rows = ", ".join(
                    f"(%(id{n})s::text, {'NULL' if key is None else f'%(key{n})s'}::text, {n})"
                    for n, (_, key) in enumerate(owner.candidates)
                )
                candidates = f"(VALUES {rows}) AS c(id, key, n)"
            owned = ", ".join(f"'{status}'" for status in sorted(owner.statuses))
            first = (
                f"(SELECT c.id FROM {candidates} JOIN {self.execution} x ON x.{ec('id')} = c.id "
                f"WHERE x.{ec('status')} IN ({owned}) AND (c.key IS NULL OR NOT EXISTS "
                f"(SELECT 1 FROM {self.waiter} k WHERE k.{wc('execution')} = c.id AND k.{wc('key')} = c.key)) "
                f"ORDER BY c.n LIMIT 1)"
                if owner.candidates
                else "NULL::text"
            )
            if owner.waiting:
                first = (
                    f"COALESCE((SELECT w.{wc('execution')} FROM {self.waiter} w "
                    f"WHERE w.{wc('kind')} = %(kind)s::text AND w.{wc('target')} = %(target)s::text "
                    f"AND w.{wc('status')} = '{W.OPEN}' ORDER BY w.{wc('id')} LIMIT 1), {first})"
                )
            parts.append(f"owner AS (SELECT {first} AS id)")
        if with_event:
            execution = "(SELECT id FROM owner)" if owner is not None else "NULL"
            only_owned = " WHERE (SELECT id FROM owner) IS NOT NULL" if owner is not None else ""
            parts.append(
                f"event AS (INSERT INTO {self.events} ({vc('kind')}, {vc('name')}, {vc('event_id')}, "
                f"{vc('execution')}, {vc('payload')}, {vc('created_at')}) "
                f"SELECT %(kind)s::text, %(target)s::text, %(event_id)s::text, {execution}, %(payload)s::jsonb, {now}"
                f"{only_owned} ON CONFLICT ({vc('kind')}, {vc('event_id')}) DO NOTHING RETURNING {vc('id')} AS id)"
            )
        where = [
            f"w.{wc('kind')} = %(kind)s::text",
            f"w.{wc('target')} = %(target)s::text",
            f"w.{wc('status')} = '{W.OPEN}'",
        ]
        if owner is not None and owner.addressed:
            where.append(f"w.{wc('execution')} = (SELECT id FROM owner)")
        if with_event:
            where.append(f"(w.{wc('match')} IS NULL OR %(payload)s::jsonb @> w.{wc('match')})")
            where.append("EXISTS (SELECT 1 FROM event)")
        unsure = f"w.{wc('match')} IS NOT NULL AND {_UNSURE.format('w.' + wc('match'))}"
        parts.append(
            f"open AS (SELECT DISTINCT ON (w.{wc('execution')}) w.{wc('id')} AS id, w.{wc('execution')} AS execution, "
            f"w.{wc('key')} AS key, w.{wc('settles')} AS settles, {unsure} AS unsure FROM {self.waiter} w "
            f"WHERE {' AND '.join(where)} ORDER BY w.{wc('execution')}, w.{wc('id')})"
        )
        taken_event = f", {wc('event')} = (SELECT id FROM event)" if with_event else ""
        parts.append(
            f"taken AS (UPDATE {self.waiter} w SET {wc('status')} = '{W.SATISFIED}'{taken_event}, "
            f"{wc('resolved_at')} = {now} FROM open o WHERE w.{wc('id')} = o.id AND NOT o.unsure "
            f"AND w.{wc('status')} = '{W.OPEN}' RETURNING o.execution, o.key, o.settles)"
        )
        assignments = []
        for name in settled:
            if name == "meta":
                assignments.append(f"{sc('meta')} = COALESCE(r.{sc('meta')}, '{{}}'::jsonb) || %(s_meta)s::jsonb")
            elif request.settle[name] is NOW:
                assignments.append(f"{sc(name)} = {now}")
            else:
                assignments.append(f"{sc(name)} = %(s_{name})s{_RECORD_CASTS.get(name, '::text')}")
        parts.append(
            f"settled AS (UPDATE {self.step} r SET {', '.join(assignments)} FROM taken t "
            f"WHERE t.settles AND r.{sc('execution')} = t.execution AND r.{sc('key')} = t.key "
            f"AND r.{sc('status')} = '{StepStatus.WAITING}' RETURNING 1)"
        )
        statuses = sorted(request.moves)
        listed = ", ".join(f"'{status}'" for status in statuses)
        parts.append(
            f"locked AS (SELECT x.{ec('id')} AS id, x.{ec('status')} AS status FROM {self.execution} x "
            f"WHERE x.{ec('id')} IN (SELECT execution FROM taken) AND x.{ec('status')} IN ({listed}) "
            f"ORDER BY x.{ec('id')} FOR UPDATE)"
        )
        sets = []
        for name in moved:
            cases = []
            for status in statuses:
                fields = request.moves[status]
                if name in fields:
                    value = now if fields[name] is NOW else f"%(m_{status}_{name})s{_EXECUTION_CASTS.get(name, '::text')}"
                    cases.append(f"WHEN '{status}' THEN {value}")
            sets.append(f"{ec(name)} = CASE l.status {' '.join(cases)} ELSE x.{ec(name)} END")
        parts.append(
            f"moved AS (UPDATE {self.execution} x SET {', '.join(sets)} FROM locked l WHERE x.{ec('id')} = l.id "
            f"RETURNING x.{ec('id')} AS id, x.{ec('queue')} AS queue, l.status AS status)"
        )
        event_id = "(SELECT id FROM event)" if with_event else "NULL::bigint"
        owned = "(SELECT id FROM owner)" if owner is not None else "NULL::text"
        existed = (
            f"EXISTS (SELECT 1 FROM {self.events} e WHERE e.{vc('kind')} = %(kind)s::text "
            f"AND e.{vc('event_id')} = %(event_id)s::text)"
            if with_event
            else "FALSE"
        )
        return (
            f"WITH {', '.join(parts)} SELECT {event_id}, {owned}, {existed}, (SELECT count(*) FROM taken), "
            f"(SELECT json_agg(json_build_array(id, queue, status)) FROM moved), "
            f"EXISTS (SELECT 1 FROM open WHERE unsure), (SELECT count(*) FROM settled)"
        )

    @staticmethod
    def decode(request: Satisfaction, row: tuple) -> Satisfied:
        event, owner, existed, taken, moved, unsure, _ = row
        if request.event is not None and event is None:
            if request.owner is not None and owner is None:
                return Satisfied(repeat=bool(existed))
            return Satisfied(repeat=True, owner=owner)
        moved = json.loads(moved) if isinstance(moved, str) else moved
        return Satisfied(
            owner=owner,
            event=event,
            taken=int(taken),
            moved=[(execution_id, queue, status) for execution_id, queue, status in moved or ()],
            unsure=bool(unsure),
        )


# Up to this many candidates are listed in the text (one text per count, and per key given or not);
# more are passed as arrays.
_LISTED = 4


def _listed(owner: Owner) -> bool:
    return len(owner.candidates) <= _LISTED


def _owner_shape(owner: Owner) -> tuple:
    listed = tuple(key is None for _, key in owner.candidates) if _listed(owner) else None
    return owner.addressed, owner.waiting, tuple(sorted(owner.statuses)), listed


def _json(value: Any) -> str | None:
    return None if value is None else json.dumps(value, separators=(",", ":"), ensure_ascii=False)
