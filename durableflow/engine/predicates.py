"""The conditions storages select executions by, written once in the engine's terms.

A claim, the sweep's scans (due, stale, overdue) and the same-host lease scan are each a small
tree over an execution's fields (an item task's claim: over its step record's). The memory
storage evaluates a tree (``holds``); the ORM storage renders the same tree as SQL for its
hand-written claims and as a ``Q`` for its QuerySets (``durableflow.orm.predicates``). So a
boundary such as ``lease_expires_at == now`` answers the same in every storage: a lease is free
only once it expired *before* now.

Comparisons follow SQL's rule for NULL: a field that is None satisfies only ``Null``; a parameter
that is None matches nothing.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Callable, Mapping, Union

from durableflow.engine.states import DUE_ONLY, LEASED, RUNNABLE, ExecutionStatus, StepStatus, sources_for

__all__ = [
    "NOW",
    "Ago",
    "Null",
    "Before",
    "NotAfter",
    "NotBefore",
    "In",
    "Equals",
    "AllOf",
    "AnyOf",
    "Condition",
    "holds",
    "LEASE_FREE",
    "LEASE_LAPSED",
    "CLAIMABLE",
    "DUE",
    "STALE",
    "OVERDUE",
    "LEASE_LIVE",
    "LEASE_EXPIRED",
    "ITEM_CLAIMABLE",
    "CLAIM_FIELDS",
]


class _Now:
    """The storage's clock at the statement."""

    def __repr__(self) -> str:
        return "NOW"


NOW = _Now()


@dataclass(frozen=True)
class Ago:
    """``now`` minus the parameter ``param``, in seconds."""

    param: str


Moment = Union[_Now, Ago]


@dataclass(frozen=True)
class Null:
    field: str


@dataclass(frozen=True)
class Before:
    """``field < moment`` (strictly)."""

    field: str
    moment: Moment = NOW


@dataclass(frozen=True)
class NotAfter:
    """``field <= moment``."""

    field: str
    moment: Moment = NOW


@dataclass(frozen=True)
class NotBefore:
    """``field >= moment``."""

    field: str
    moment: Moment = NOW


@dataclass(frozen=True)
class In:
    field: str
    values: frozenset[str]


@dataclass(frozen=True)
class Equals:
    """``field`` equals the parameter ``param``."""

    field: str
    param: str


@dataclass(frozen=True)
class AllOf:
    parts: tuple[Condition, ...]

    def __init__(self, *parts: Condition):
        object.__setattr__(self, "parts", parts)


@dataclass(frozen=True)
class AnyOf:
    parts: tuple[Condition, ...]

    def __init__(self, *parts: Condition):
        object.__setattr__(self, "parts", parts)


Condition = Union[Null, Before, NotAfter, NotBefore, In, Equals, AllOf, AnyOf]


def moment(at: Moment, now: datetime, params: Mapping[str, Any]) -> datetime:
    return now if isinstance(at, _Now) else now - timedelta(seconds=params[at.param])


_COMPARE: dict[type, Callable[[Any, Any], bool]] = {
    Before: lambda value, at: value < at,
    NotAfter: lambda value, at: value <= at,
    NotBefore: lambda value, at: value >= at,
}


def holds(condition: Condition, row: Any, now: datetime, params: Mapping[str, Any] | None = None) -> bool:
    """Whether ``row`` (an object with the fields as attributes) satisfies ``condition`` at ``now``."""
    params = params or {}
    kind = type(condition)
    if kind is AllOf:
        return all(holds(part, row, now, params) for part in condition.parts)  # type: ignore[union-attr]
    if kind is AnyOf:
        return any(holds(part, row, now, params) for part in condition.parts)  # type: ignore[union-attr]
    value = getattr(row, condition.field)  # type: ignore[union-attr]
    if kind is Null:
        return value is None
    if value is None:
        return False
    if kind is In:
        return value in condition.values  # type: ignore[union-attr]
    if kind is Equals:
        wanted = params.get(condition.param)  # type: ignore[union-attr]
        return wanted is not None and value == wanted
    return _COMPARE[kind](value, moment(condition.moment, now, params))  # type: ignore[union-attr]


# The lease may be taken: none is held, it expired before now, or it is the parameter
# ``take_over``, a lease a delivery found held by a holder that is gone (engine/holders.py).
LEASE_FREE = AnyOf(Null("lease_token"), Before("lease_expires_at"), Equals("lease_token", "take_over"))
# Nobody holds it: no lease, or one that expired before now.
LEASE_LAPSED = AnyOf(Null("lease_token"), Before("lease_expires_at"))
# Not queued behind its concurrency key's holders (engine/concurrency.py).
_ADMITTED = Null("concurrency_ticket")
_ANYTIME = frozenset(sources_for(ExecutionStatus.RUNNING) - DUE_ONLY)
_ONCE_DUE = frozenset(sources_for(ExecutionStatus.RUNNING) & DUE_ONLY)

# What a delivery may claim: a status that may move to running (one that must be due, once due),
# a free lease, admitted.
CLAIMABLE = AllOf(
    AnyOf(In("status", _ANYTIME), AllOf(In("status", _ONCE_DUE), NotAfter("wake_at"))),
    LEASE_FREE,
    _ADMITTED,
)
# Waiting executions whose timer, retry or timeout is due: the sweep wakes them.
DUE = AllOf(In("status", DUE_ONLY), NotAfter("wake_at"))
# Runnable whenever free, nobody on it, its wake-up overdue by ``redeliver_after`` seconds: the
# sweep sends it again.
STALE = AllOf(
    In("status", frozenset(RUNNABLE - DUE_ONLY)), LEASE_LAPSED, Before("enqueued_at", Ago("redeliver_after")), _ADMITTED
)
# Unfinished past its deadline and not being cancelled yet: the sweep cancels it.
OVERDUE = AllOf(In("status", RUNNABLE), NotAfter("deadline_at"), Null("cancel_requested"))
# Held by a delivery whose lease ran out before now (its worker died or hangs).
LEASE_EXPIRED = AllOf(In("status", LEASED), Before("lease_expires_at"))
# Held by a delivery whose lease has not expired (the same-host scan adds the holder's host).
LEASE_LIVE = AllOf(In("status", LEASED), NotBefore("lease_expires_at"))
# An item (a step body run as its own task) that an item task may start: sent and waiting, or
# running under an attempt that started more than ``lease_seconds`` before now (its worker died or
# hangs). Over the item's step record; its execution must be unfinished too (``RUNNABLE``).
ITEM_CLAIMABLE = AnyOf(
    In("status", frozenset({StepStatus.WAITING})),
    AllOf(In("status", frozenset({StepStatus.RUNNING})), Before("started_at", Ago("lease_seconds"))),
)

# The execution fields a claim returns to its delivery (``ClaimRow.execution``), in this order.
CLAIM_FIELDS = (
    "workflow",
    "version",
    "params",
    "parent_id",
    "root_id",
    "deliveries",
    "waiting_for",
    "queue",
    "cancel_requested",
    "seed",
    "lost_deliveries",
    "trace_context",
)
