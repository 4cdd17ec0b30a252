"""The journal on a shared time axis: each step a row, its duration a bar.

Pure arithmetic over the records (no queries, no HTML): the template draws each row's bar at
``offset``% of the axis, ``width``% wide. The axis runs from the execution's start (or its
first step) to its end, or to now while it is unfinished, so a step still running reaches
the right edge.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Iterable

from durableflow.admin.display import duration_text

__all__ = ["Row", "Timeline", "build"]

# A bar never thinner than this (percent of the axis): a 2 ms step on a 3-day axis stays visible.
MIN_WIDTH = 0.6
TICKS = 4


@dataclass
class Row:
    record: Any
    offset: float  # percent of the axis where the bar starts
    width: float  # percent of the axis it covers
    start: timedelta | None  # from the axis' start
    duration: timedelta | None
    open: bool  # still running or waiting: the bar reaches the end of the axis

    @property
    def start_text(self) -> str:
        return "" if self.start is None else f"+{duration_text(self.start)}"

    @property
    def duration_text(self) -> str:
        return duration_text(self.duration)


@dataclass
class Timeline:
    rows: list[Row]
    start: datetime | None
    end: datetime | None
    ticks: list[tuple[float, str]] = field(default_factory=list)

    @property
    def span(self) -> timedelta | None:
        return self.end - self.start if self.start and self.end else None

    @property
    def span_text(self) -> str:
        return duration_text(self.span)


def build(
    records: Iterable[Any],
    *,
    started: datetime | None = None,
    finished: datetime | None = None,
    now: datetime,
) -> Timeline:
    """Lay ``records`` (objects with ``started_at``, ``finished_at``) on one axis.

    ``started``/``finished``: the execution's, when known; an unfinished execution's axis ends
    at ``now``.
    """
    records = list(records)
    moments = [m for r in records for m in (r.started_at, r.finished_at) if m is not None]
    start = min([m for m in (started, *moments) if m is not None], default=None)
    end: datetime | None = finished or now
    end = max([end, *moments]) if moments else end
    if start is None or end <= start:
        end = start + timedelta(milliseconds=1) if start else None
    rows = [_row(record, start, end) for record in records]
    return Timeline(rows=rows, start=start, end=end, ticks=_ticks(start, end))


def _row(record: Any, start: datetime | None, end: datetime | None) -> Row:
    began = record.started_at or record.finished_at
    if start is None or end is None or began is None:
        return Row(record, 0.0, 0.0, None, None, open=record.finished_at is None)
    span = (end - start).total_seconds()
    is_open = record.finished_at is None
    stop = end if is_open else record.finished_at
    offset = (began - start).total_seconds() / span * 100
    width = max((stop - began).total_seconds() / span * 100, MIN_WIDTH)
    offset = min(max(offset, 0.0), 100.0 - MIN_WIDTH)
    width = min(width, 100.0 - offset)
    duration = None if record.started_at is None else stop - record.started_at
    return Row(record, round(offset, 3), round(width, 3), began - start, duration, open=is_open)


def _ticks(start: datetime | None, end: datetime | None) -> list[tuple[float, str]]:
    if start is None or end is None:
        return []
    span = end - start
    return [(100 * i / TICKS, f"+{duration_text(span * i / TICKS)}" if i else "0") for i in range(TICKS + 1)]
