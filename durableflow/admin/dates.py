"""A date hierarchy that reads two index entries instead of the whole table.

Django's ``date_hierarchy`` lists the years (months, days) that have rows with ``SELECT
DISTINCT`` over a date truncation of every row in the list: a full scan of a large table on
every page view. This one asks for the first and last date of the current list (two reads
that both databases answer from an index on the field) and offers every year, month or day
between them. A period inside the range may hold no row; its page is empty.

Same context as Django's ``date_hierarchy`` tag, so Django's own template draws it.
"""

from __future__ import annotations

import datetime

from django.utils import formats, timezone
from django.utils.text import capfirst
from django.utils.translation import gettext as _

__all__ = ["date_hierarchy"]


def date_hierarchy(cl) -> dict:
    field_name = cl.date_hierarchy
    if not field_name:
        return {"show": False}
    year_field, month_field, day_field = (f"{field_name}__{part}" for part in ("year", "month", "day"))
    year, month, day = (cl.params.get(name) for name in (year_field, month_field, day_field))

    def link(filters):
        return cl.get_query_string(filters, [f"{field_name}__"])

    first, last = _range(cl.queryset, field_name)
    if not (year or month or day) and first and last and first.year == last.year:
        # One year (one month) of rows: start a level down, as Django does.
        year = first.year
        if first.month == last.month:
            month = first.month
    if year and month and day:
        moment = datetime.date(int(year), int(month), int(day))
        return {
            "show": True,
            "back": {
                "link": link({year_field: year, month_field: month}),
                "title": capfirst(formats.date_format(moment, "YEAR_MONTH_FORMAT")),
            },
            "choices": [{"title": capfirst(formats.date_format(moment, "MONTH_DAY_FORMAT"))}],
        }
    if year and month:
        days = _between(first, last, "day")
        return {
            "show": True,
            "back": {"link": link({year_field: year}), "title": str(year)},
            "choices": [
                {
                    "link": link({year_field: year, month_field: month, day_field: d.day}),
                    "title": capfirst(formats.date_format(d, "MONTH_DAY_FORMAT")),
                }
                for d in days
            ],
        }
    if year:
        months = _between(first, last, "month")
        return {
            "show": True,
            "back": {"link": link({}), "title": _("All dates")},
            "choices": [
                {
                    "link": link({year_field: year, month_field: m.month}),
                    "title": capfirst(formats.date_format(m, "YEAR_MONTH_FORMAT")),
                }
                for m in months
            ],
        }
    return {
        "show": True,
        "back": None,
        "choices": [{"link": link({year_field: y.year}), "title": str(y.year)} for y in _between(first, last, "year")],
    }


def _range(queryset, field_name: str) -> tuple[datetime.date | None, datetime.date | None]:
    """The first and last date of the list, in the current time zone.

    Two ``ORDER BY ... LIMIT 1`` reads rather than one ``MIN(), MAX()``: SQLite answers a lone
    MIN or an ordered LIMIT from an index, but scans the whole index for both at once.
    """
    dates = queryset.values_list(field_name, flat=True)
    first, last = dates.order_by(field_name).first(), dates.order_by(f"-{field_name}").first()
    if first is None or last is None:
        return None, None
    if isinstance(first, datetime.datetime):
        first, last = (timezone.localtime(v) if timezone.is_aware(v) else v for v in (first, last))
        first, last = first.date(), last.date()
    return first, last


def _between(first: datetime.date | None, last: datetime.date | None, unit: str) -> list[datetime.date]:
    """Every year, month or day from ``first`` to ``last`` (the list is already narrowed to
    the chosen year or month, so the range stays within it)."""
    if first is None or last is None:
        return []
    if unit == "year":
        return [datetime.date(y, 1, 1) for y in range(first.year, last.year + 1)]
    if unit == "month":
        months = range(first.year * 12 + first.month - 1, last.year * 12 + last.month)
        return [datetime.date(m // 12, m % 12 + 1, 1) for m in months]
    return [first + datetime.timedelta(days=n) for n in range((last - first).days + 1)]
