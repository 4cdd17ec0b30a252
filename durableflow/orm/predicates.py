"""The engine's conditions (``durableflow.engine.predicates``) as SQL text and as ``Q`` objects.

The hand-written claim statement (``durableflow.orm.sql``) takes its WHERE clause from
``to_sql``; the QuerySets of the sweep's scans and of ``durableflow.monitoring`` take theirs
from ``to_q``. Neither spells a condition of its own.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any, Callable, Mapping

from django.db.models import Q
from django.db.models.functions import Now

from durableflow.engine.predicates import (
    AllOf,
    AnyOf,
    Before,
    Condition,
    Equals,
    In,
    Moment,
    NotAfter,
    NotBefore,
    Null,
    _Now,
)

__all__ = ["to_sql", "to_q"]

_OPERATORS = {Before: ("<", "lt"), NotAfter: ("<=", "lte"), NotBefore: (">=", "gte")}


def to_sql(
    condition: Condition,
    column: Callable[[str], str],
    now: str,
    param: Callable[[str], str],
    ago: Callable[[str], str] | None = None,
) -> str:
    """``condition`` as a SQL boolean expression.

    ``column(field)``: the quoted column; ``now``: the clock's SQL; ``param(name)``: a
    parameter's placeholder; ``ago(name)``: the SQL of now minus that parameter's seconds.
    """

    def render(node: Condition) -> str:
        kind = type(node)
        if kind is AllOf or kind is AnyOf:
            joiner = " AND " if kind is AllOf else " OR "
            return "(" + joiner.join(render(part) for part in node.parts) + ")"  # type: ignore[union-attr]
        name = column(node.field)  # type: ignore[union-attr]
        if kind is Null:
            return f"{name} IS NULL"
        if kind is In:
            values = sorted(node.values)  # type: ignore[union-attr]
            if len(values) == 1:  # ``=``, so that a partial index on it matches as written
                return f"{name} = '{values[0]}'"
            quoted = ", ".join(f"'{value}'" for value in values)
            return f"{name} IN ({quoted})"
        if kind is Equals:
            return f"{name} = {param(node.param)}"  # type: ignore[union-attr]
        at: Moment = node.moment  # type: ignore[union-attr]
        if isinstance(at, _Now):
            moment = now
        elif ago is None:
            raise ValueError(f"{node!r} needs the SQL of a moment before now")
        else:
            moment = ago(at.param)
        return f"{name} {_OPERATORS[kind][0]} {moment}"

    return render(condition)


def to_q(condition: Condition, now: Any = None, params: Mapping[str, Any] | None = None) -> Q:
    """``condition`` as a ``Q`` (``now``: a datetime or an expression; the database's by default)."""
    now = Now() if now is None else now
    params = params or {}

    def render(node: Condition) -> Q:
        kind = type(node)
        if kind is AllOf or kind is AnyOf:
            parts = [render(part) for part in node.parts]  # type: ignore[union-attr]
            combined = parts[0]
            for part in parts[1:]:
                combined = combined & part if kind is AllOf else combined | part
            return combined
        field = node.field  # type: ignore[union-attr]
        if kind is Null:
            return Q(**{f"{field}__isnull": True})
        if kind is In:
            values = sorted(node.values)  # type: ignore[union-attr]
            return Q(**{field: values[0]}) if len(values) == 1 else Q(**{f"{field}__in": values})
        if kind is Equals:
            wanted = params.get(node.param)  # type: ignore[union-attr]
            return Q(**{field: wanted}) if wanted is not None else Q(pk__in=[])
        at: Moment = node.moment  # type: ignore[union-attr]
        moment = now if isinstance(at, _Now) else now - timedelta(seconds=params[at.param])
        return Q(**{f"{field}__{_OPERATORS[kind][1]}": moment})

    return render(condition)
