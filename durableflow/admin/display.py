"""How the admin shows values: pretty JSON, status badges, durations, times, "waiting for".

Every page of every durableflow model renders through these, so a value, a status or a
duration looks the same on the execution page, in a list and on a confirmation page.
Colours live in ``static/durableflow/admin.css`` (one class per status), never here.
"""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from typing import Any

from django.utils import timezone
from django.utils.formats import date_format
from django.utils.html import format_html
from django.utils.safestring import SafeString, mark_safe
from django.utils.timesince import timesince, timeuntil

__all__ = [
    "pretty_json",
    "status_badge",
    "duration_text",
    "when",
    "waiting_text",
    "error_block",
]

# Longer values are collapsed behind their first line (a <details> element: no JavaScript).
COLLAPSE_LINES = 12
COLLAPSE_CHARS = 600
# Past this, a value is cut for display: a page must stay usable with a 1 MB payload in it.
DISPLAY_CHARS = 100_000


def pretty_json(value: Any, *, collapse: bool = True) -> SafeString:
    """``value`` as indented JSON in a ``<pre>``; long ones collapsed, huge ones cut."""
    text = json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False)
    cut = len(text) > DISPLAY_CHARS
    if cut:
        text = text[:DISPLAY_CHARS]
    lines = text.count("\n") + 1
    note = (
        format_html(
            '<p class="df-note">Cut at {} characters for display; the API returns it whole.</p>', f"{DISPLAY_CHARS:,}"
        )
        if cut
        else ""
    )
    block = format_html('<pre class="df-json">{}</pre>{}', text, note)
    if not collapse or (lines <= COLLAPSE_LINES and len(text) <= COLLAPSE_CHARS):
        return block
    first = text.split("\n", 1)[0]
    summary = _preview(value) or first
    return format_html(
        '<details class="df-json-long"><summary><code>{}</code> <span class="df-quiet">{}</span></summary>{}</details>',
        summary,
        f"{lines:,} lines",
        block,
    )


def _preview(value: Any, limit: int = 80) -> str:
    """One line for a collapsed value: its compact JSON, cut."""
    compact = json.dumps(value, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return compact if len(compact) <= limit else compact[: limit - 1] + "…"


def status_badge(status: str, label: str | None = None) -> SafeString:
    """A coloured badge; the colour comes from the ``df-status-<status>`` CSS class."""
    return format_html('<span class="df-status df-status-{}">{}</span>', status, label or status.replace("_", " "))


def duration_text(duration: timedelta | None) -> str:
    """``0.4 ms``, ``12 ms``, ``3.4 s``, ``2 min 5 s``, ``3 h 2 min``, ``2 d 3 h``; ``""`` for none."""
    if duration is None:
        return ""
    seconds = duration.total_seconds()
    if seconds == 0:
        return "0 ms"
    if seconds < 0.01:
        return f"{seconds * 1000:.1f} ms"
    if seconds < 1:
        return f"{seconds * 1000:.0f} ms"
    if seconds < 60:
        return f"{seconds:.1f} s"
    minutes, secs = divmod(int(seconds), 60)
    if minutes < 60:
        return f"{minutes} min {secs} s" if secs else f"{minutes} min"
    hours, minutes = divmod(minutes, 60)
    if hours < 24:
        return f"{hours} h {minutes} min" if minutes else f"{hours} h"
    days, hours = divmod(hours, 24)
    return f"{days} d {hours} h" if hours else f"{days} d"


def when(moment: datetime | str | None, now: datetime | None = None) -> SafeString | str:
    """A timestamp in the current time zone, with "in 5 minutes" / "3 minutes ago" beside it."""
    if moment is None or moment == "":
        return ""
    if isinstance(moment, str):
        try:
            at = datetime.fromisoformat(moment)
        except ValueError:
            return moment
    else:
        at = moment
    if timezone.is_naive(at):
        at = timezone.make_aware(at, timezone.get_default_timezone())
    now = now or timezone.now()
    relative = f"in {timeuntil(at, now)}" if at > now else f"{timesince(at, now)} ago"
    stamp = date_format(timezone.localtime(at), "Y-m-d H:i:s")
    return format_html('<time datetime="{}" title="{}">{}</time>', at.isoformat(), relative, stamp)


# Entries of ``waiting_for`` shown beside its kind (the rest is in the JSON on the page).
_WAITING_DETAILS = ("step", "key", "event", "name", "token", "store", "effect", "execution", "reason")


def waiting_text(waiting_for: dict[str, Any] | None, wake_at: datetime | None = None) -> SafeString | str:
    """ "timer · step nap · until 2025-… (in 4 minutes)" for a waiting execution."""
    if not waiting_for:
        return ""
    parts = [format_html("<strong>{}</strong>", waiting_for.get("kind", "something"))]
    for name in _WAITING_DETAILS:
        detail = waiting_for.get(name)
        if isinstance(detail, (str, int)) and detail != "":
            parts.append(format_html("{} <code>{}</code>", name, detail))
    until = wake_at or waiting_for.get("until")
    if until:
        parts.append(format_html("until {}", when(until)))
    return mark_safe(" · ".join(str(part) for part in parts))


def error_block(error: dict[str, Any] | None) -> SafeString | str:
    """A recorded error: its code and message, its type and step, the traceback collapsed."""
    if not error:
        return ""
    details = [f"{name} {error[name]}" for name in ("type", "step") if error.get(name)]
    traceback = error.get("traceback")
    extra = {k: v for k, v in error.items() if k not in ("code", "message", "type", "step", "traceback")}
    return format_html(
        '<div class="df-error"><p><code class="df-code">{}</code> {}</p>{}{}{}</div>',
        error.get("code", ""),
        error.get("message", ""),
        format_html('<p class="df-quiet">{}</p>', " · ".join(details)) if details else "",
        format_html('<details><summary>traceback</summary><pre class="df-traceback">{}</pre></details>', traceback)
        if traceback
        else "",
        pretty_json(extra) if extra else "",
    )
