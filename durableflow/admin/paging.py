"""Counting a changelist without counting a large table.

Django's admin paginator runs ``COUNT(*)`` over the whole filtered set on every page: with a
million executions that is a scan of the table per page view. Here:

- the unfiltered list on PostgreSQL reads the planner's estimate (``pg_class.reltuples``,
  kept by autovacuum's ANALYZE): no scan at all, shown as "about N";
- any other list counts at most ``cap + 1`` rows (``COUNT(*)`` over a ``LIMIT`` subquery,
  read off an index): exact below the cap, "more than N" above it.
"""

from __future__ import annotations

from dataclasses import dataclass

from django.core.paginator import Paginator
from django.db import connections
from django.utils.functional import cached_property

__all__ = ["Estimate", "estimated_count", "EstimatedCountPaginator"]

DEFAULT_CAP = 10_000


@dataclass(frozen=True)
class Estimate:
    value: int
    # "exact", "about" (the planner's estimate) or "more than" (the count stopped at the cap)
    kind: str = "exact"

    @property
    def exact(self) -> bool:
        return self.kind == "exact"

    def __str__(self) -> str:
        return f"{self.value:,}" if self.exact else f"{self.kind} {self.value:,}"


def estimated_count(queryset, cap: int = DEFAULT_CAP) -> Estimate:
    """How many rows ``queryset`` has, without reading more than ``cap + 1`` of them."""
    if not queryset.query.where and not queryset.query.distinct:
        planned = _planner_estimate(queryset)
        if planned is not None and planned > cap:
            return Estimate(planned, "about")
    counted = queryset.order_by().values("pk")[: cap + 1].count()
    return Estimate(cap, "more than") if counted > cap else Estimate(counted)


def _planner_estimate(queryset) -> int | None:
    """PostgreSQL's row estimate for the model's table; None elsewhere or before any ANALYZE."""
    connection = connections[queryset.db]
    if connection.vendor != "postgresql":
        return None
    table = connection.ops.quote_name(queryset.model._meta.db_table)
    with connection.cursor() as cursor:
        cursor.execute("SELECT reltuples::bigint FROM pg_class WHERE oid = to_regclass(%s)", [table])
        row = cursor.fetchone()
    # -1: never analyzed (a new table); the bounded count answers then.
    return row[0] if row and row[0] >= 0 else None


class EstimatedCountPaginator(Paginator):
    """Django's paginator with an estimated ``count`` (see the module docstring).

    Page links stop after the current page's neighbours when the count is not exact: the
    last pages of an estimate may not exist, and an OFFSET that deep reads the whole table.
    """

    cap = DEFAULT_CAP

    @cached_property
    def estimate(self) -> Estimate:
        return estimated_count(self.object_list, self.cap)

    @cached_property
    def count(self) -> int:
        return self.estimate.value

    def get_elided_page_range(self, number=1, *, on_each_side=3, on_ends=2):
        if self.estimate.exact:
            yield from super().get_elided_page_range(number, on_each_side=on_each_side, on_ends=on_ends)
            return
        number = self.validate_number(number)
        first = max(1, number - on_each_side)
        last = min(self.num_pages, number + on_each_side)
        if first > on_ends + 1:
            yield from range(1, on_ends + 1)
            yield self.ELLIPSIS
        else:
            first = 1
        yield from range(first, last + 1)
        if last < self.num_pages:
            yield self.ELLIPSIS
