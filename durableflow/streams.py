"""Reading a run's streams from outside it: views, scripts, the REST API and the admin.

    import durableflow

    after = 0
    while True:
        page = durableflow.streams.read(execution_id, "tokens", after=after, wait=10)
        for chunk in page["chunks"]:
            print(chunk["seq"], chunk["chunk"])
            after = chunk["seq"]
        if page["done"]:
            break

What a run writes with ``ctx.stream(id).write(chunk)`` or ``ctx.step.stream(...)``
(``durableflow.engine.streams``) is readable as soon as each write commits. ``wait=`` blocks
until a chunk after ``after`` exists or the run is finished: on PostgreSQL it is woken by the
notification each stored chunk sends (the listener ``result()`` uses, ``durableflow.orm.waiting``),
not by polling; it re-reads at least every ``RESULT_RECHECK_SECONDS`` in case one was lost.
"""

from __future__ import annotations

import math
from typing import Any

from durableflow.engine.streams import READ_LIMIT

__all__ = ["read", "streams", "READ_LIMIT"]


def read(
    execution_id: str, stream_id: str, after: int = 0, wait: float | None = None, *, limit: int = READ_LIMIT
) -> dict[str, Any]:
    """``{"chunks": [{"seq", "chunk", "at"}], "done": bool}``: the chunks of ``stream_id`` after
    ``after`` (at most ``limit``, in order); ``done`` once the execution is finished and no chunk
    is left after these.

    ``wait`` seconds: if there is no chunk after ``after`` yet and the run is not finished, block
    until there is one, the run finishes, or the time is up (then the answer is empty).
    ``ExecutionNotFound`` for an unknown execution; ``WorkflowValueError("INVALID_STREAM")`` for a
    stream id no stream can have; ``ValueError`` for a bad ``after``, ``limit`` or ``wait``.
    """
    from durableflow import operations
    from durableflow.orm import waiting
    from durableflow.conf import df_settings
    from durableflow.orm import db_alias

    if wait is not None and (isinstance(wait, bool) or not isinstance(wait, (int, float)) or not 0 <= wait < math.inf):
        raise ValueError(f"wait is a number of seconds from 0, not {wait!r}")
    verbs = operations.engine()
    if not wait:
        return verbs.read_stream(execution_id, stream_id, after, limit)
    return waiting.until(
        execution_id,
        lambda: verbs.read_stream(execution_id, stream_id, after, limit),
        lambda page: bool(page["chunks"]) or page["done"],
        lambda page: execution_id,  # a stream is its own execution's: no following a continue_as_new
        wait,
        alias=db_alias(),
        recheck=df_settings.RESULT_RECHECK_SECONDS,
        also=(waiting.stream_key(execution_id),),
    )


def streams(execution_id: str) -> dict[str, int]:
    """The execution's streams: ``{stream_id: number of chunks}`` (``ExecutionNotFound`` if unknown)."""
    from durableflow import operations

    verbs = operations.engine()
    verbs.get(execution_id, ("status",))
    return verbs.stream_ids(execution_id)
