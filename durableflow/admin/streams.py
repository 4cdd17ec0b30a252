"""The execution page's Streams panel: the chunks a run wrote, growing while it runs.

The page draws the last ``PANEL_CHUNKS`` chunks of each stream; a little script
(``durableflow/streams.js``) then asks ``<id>/streams/`` (``StreamsAdminMixin.streams_view``,
the view permission, as the page) every second for the chunks after those it shows, adds them
and any new stream, and stops once the run is finished. The admin's own JSON view, not the REST
API: the admin works whether or not the project mounts ``durableflow.urls`` or lets sessions
authenticate to it.
"""

from __future__ import annotations

import json
from typing import Any, TYPE_CHECKING

from django.contrib.admin.utils import quote, unquote
from django.core.exceptions import PermissionDenied
from django.http import Http404, JsonResponse
from django.urls import path, reverse

from durableflow import exceptions, operations
from durableflow.engine.states import TERMINAL

__all__ = ["streams_panel", "StreamsAdminMixin", "PANEL_CHUNKS", "SHOWN_CHARACTERS"]

PANEL_CHUNKS = 200  # per stream, drawn with the page and per answer of the poll
SHOWN_CHARACTERS = 2000  # of one chunk (a chunk may be a megabyte)
POLL_MS = 1000


def shown(chunk: Any) -> str:
    """A chunk as the panel shows it: text as it is, any other value as compact JSON; cut short."""
    text = chunk if isinstance(chunk, str) else json.dumps(chunk, separators=(",", ":"), ensure_ascii=False)
    return text if len(text) <= SHOWN_CHARACTERS else text[:SHOWN_CHARACTERS] + "…"


def _streams(execution_id: str, positions: dict[str, int], status: str | None = None) -> dict[str, Any]:
    """The chunks of each stream after its position (none given: the last ``PANEL_CHUNKS``);
    ``status``: the execution's, as just read (else it is read here)."""
    verbs = operations.engine()
    if status is None:
        status = verbs.get(execution_id, ("status",)).status
    finished = status in TERMINAL  # read before the chunks: a finished run writes none after
    found = {}
    for stream_id, last in verbs.stream_ids(execution_id).items():
        after = positions.get(stream_id, max(last - PANEL_CHUNKS, 0))
        chunks = verbs.read_stream(execution_id, stream_id, after, PANEL_CHUNKS)["chunks"] if last > after else []
        # The seq of the last chunk sent (the next poll asks for those after it): chunks written
        # since ``stream_ids`` was read may be among them.
        upto = chunks[-1]["seq"] if chunks else after
        found[stream_id] = {
            "last": max(last, upto),
            "upto": upto,
            "skipped": after if stream_id not in positions else 0,
            "chunks": [{"seq": c["seq"], "text": shown(c["chunk"]), "at": c["at"].isoformat()} for c in chunks],
        }
    return {"streams": found, "done": finished}


def streams_panel(model_admin, request, execution) -> dict[str, Any] | None:
    found = _streams(execution.pk, {}, execution.status)
    if not found["streams"] and found["done"]:
        return None  # a finished run that wrote none: no panel
    info = model_admin.opts.app_label, model_admin.opts.model_name
    name, site = f"admin:{info[0]}_{info[1]}_streams", model_admin.admin_site.name
    url = reverse(name, args=[quote(execution.pk)], current_app=site)
    return {**found, "url": url, "poll_ms": POLL_MS}


if TYPE_CHECKING:  # what StreamsAdminMixin is mixed into
    from django.contrib.admin import ModelAdmin as _ModelAdmin
else:
    _ModelAdmin = object


class StreamsAdminMixin(_ModelAdmin):
    """``<id>/streams/?after={"stream": seq, ...}``: the JSON the Streams panel polls."""

    def get_urls(self):
        info = self.opts.app_label, self.opts.model_name
        view = self.admin_site.admin_view(self.streams_view)
        return [path("<path:object_id>/streams/", view, name="%s_%s_streams" % info), *super().get_urls()]

    def streams_view(self, request, object_id: str):
        if not self.has_view_permission(request):
            raise PermissionDenied
        try:
            positions = json.loads(request.GET.get("after") or "{}")
        except ValueError:
            positions = None
        if not isinstance(positions, dict) or not all(
            isinstance(k, str) and type(v) is int and v >= 0 for k, v in positions.items()
        ):
            return JsonResponse({"code": "INVALID_REQUEST", "message": 'after is {"stream id": seq, ...}'}, status=400)
        try:
            return JsonResponse(_streams(unquote(object_id), positions))
        except exceptions.ExecutionNotFound:
            raise Http404("no such execution") from None
