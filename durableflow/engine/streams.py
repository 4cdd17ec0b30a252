"""Streams: partial output a run hands out while it runs (an LLM's tokens, a report's lines).

    ctx.stream("log").write("packing order 7")            # chunk 1 of stream "log"
    count = ctx.step.stream("tokens", "answer", llm(prompt))  # one chunk per item

A stream is an execution's numbered chunks (1, 2, ...), each a durable value (text, most
often), stored as a row per chunk, unique per (execution, stream, seq), as soon as it is
written: a write is committed when it returns, and readers see it at once.

Replay and crashes. A chunk's number is its position: the n-th write to that stream in the
run's code. A delivery counts the writes it reaches; a write whose position is already stored
(a replay reaching it again) stores nothing, so the stream never holds a chunk twice however
often the run replays. Each insert is fenced by the delivery's lease (a zombie delivery's
write is refused, ``LeaseLost``) and conflicts on the unique (execution, stream, seq), not
with a pre-check. ``ctx.step.stream`` journals one record (kind ``stream``, value the number
of chunks) when the iterable is exhausted: a replay returns that number without iterating
again; a delivery that died mid-stream left no record, so the next one iterates again and
skips the items whose positions are stored, writing only the rest.

A chunk (encoded) is at most ``MAX_PAYLOAD_BYTES`` (``PAYLOAD_TOO_LARGE``); a chunk that is no
durable value, or a stream id that is not a non-empty string of at most 200 characters, raises
``INVALID_STREAM`` at the write. Chunks go with their execution when it is pruned.

Readers call ``Engine.read_stream`` (``durableflow.streams.read`` waits on it).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Iterable

from durableflow import exceptions, values
from durableflow.engine.context import delivery_of
from durableflow.engine.records import CancelRequested, LeaseLost
from durableflow.engine.states import TERMINAL

if TYPE_CHECKING:
    from durableflow.engine.context import Context
    from durableflow.engine.verbs import Engine

__all__ = ["KIND", "MAX_STREAM_ID", "READ_LIMIT", "Stream", "Streams", "check_stream_id", "chunk_of"]

KIND = "stream"  # the journal kind of ``ctx.step.stream``
MAX_STREAM_ID = 200
READ_LIMIT = 1000  # chunks per read, at most


def check_stream_id(stream_id: Any) -> str:
    """``stream_id`` if it can name a stream, else ``WorkflowValueError("INVALID_STREAM")``."""
    if (
        not isinstance(stream_id, str)
        or not stream_id
        or len(stream_id) > MAX_STREAM_ID
        or values.text_fault(stream_id) is not None
    ):
        raise exceptions.WorkflowValueError(
            "INVALID_STREAM",
            f"a stream id is a non-empty string of at most {MAX_STREAM_ID} characters, not {stream_id!r:.60}",
        )
    return stream_id


def chunk_of(chunk: Any, max_bytes: int) -> Any:
    """The chunk as it is stored (a durable value of at most ``max_bytes`` encoded)."""
    return values.roundtrip(chunk, code="INVALID_STREAM", max_bytes=max_bytes)[1]


@dataclass
class _Position:
    reached: int = 0  # writes this delivery reached (the last one's seq)
    stored: int | None = None  # the highest seq stored, read at the first write that needs it


class Stream:
    """``ctx.stream(stream_id)``: a handle on one of the run's streams."""

    def __init__(self, ctx: Context, stream_id: str):
        self._ctx = ctx
        self._delivery = delivery_of(ctx)
        self.stream_id = check_stream_id(stream_id)

    def write(self, chunk: Any) -> int:
        """Append ``chunk`` (text or a durable value); return its sequence number. Committed on
        return; a replay reaching a stored write stores nothing (and returns the same number)."""
        ctx = self._ctx
        delivery = self._delivery
        delivery.guard(f"stream {self.stream_id!r}")
        return append(ctx, self.stream_id, chunk)

    def __repr__(self) -> str:
        return f"<Stream {self.stream_id!r} of {self._ctx.execution_id}>"


def position(ctx: Context, stream_id: str) -> _Position:
    delivery = delivery_of(ctx)
    return delivery.streams.setdefault(stream_id, _Position())


def append(ctx: Context, stream_id: str, chunk: Any) -> int:
    """The next write of ``stream_id`` in this delivery: stored unless its position is."""
    delivery = delivery_of(ctx)
    decoded = chunk_of(chunk, delivery.settings.max_payload_bytes)
    at = position(ctx, stream_id)
    at.reached += 1
    if delivery.replay_only:  # a replay check writes nothing
        return at.reached
    if at.stored is None:
        at.stored = delivery.journal.storage.last_chunk(ctx.execution_id, stream_id)
    if at.reached <= at.stored:
        return at.reached
    if delivery.cancel is not None:  # a cancelled run stops where it would do something new
        raise delivery.latch(CancelRequested(delivery.cancel.get("message", "cancelled")))
    delivery.go_live()
    try:
        delivery.journal.write_chunk(stream_id, at.reached, decoded)
    except LeaseLost as interrupt:
        raise delivery.latch(interrupt)
    at.stored = at.reached
    return at.reached


def skip(ctx: Context, stream_id: str, count: int) -> None:
    """A replayed ``ctx.step.stream`` wrote ``count`` chunks: the stream's position moves past them."""
    position(ctx, stream_id).reached += count


def consume(ctx: Context, key: str, stream_id: str, iterable: Iterable[Any]) -> tuple[int, int]:
    """Write each item of ``iterable`` as the next chunk: ``(first seq, count)``. The items are
    produced as the body of step ``key`` (no step may be called while one is made)."""
    delivery = delivery_of(ctx)
    first = position(ctx, stream_id).reached + 1
    count = 0
    iterator = iter(iterable)
    while True:
        delivery.in_step = key
        try:
            item = next(iterator)
        except StopIteration:
            break
        finally:
            delivery.in_step = None
        if ctx.interrupt is not None:
            raise ctx.interrupt
        append(ctx, stream_id, item)
        count += 1
    return first, count


class Streams:
    """Reading streams (a mixin of ``Engine``)."""

    def read_stream(self: Engine, execution_id: str, stream_id: str, after: int = 0, limit: int = READ_LIMIT) -> dict:
        """``{"chunks": [{"seq", "chunk", "at"}], "done": bool}``: the chunks after ``after``, at most
        ``limit``; ``done`` once the execution is finished and no chunk is left after these.

        ``ExecutionNotFound`` for an unknown execution. The status is read before the chunks: a
        finished execution writes none after it finished, so ``done`` never hides one.
        """
        check_stream_id(stream_id)
        if isinstance(after, bool) or not isinstance(after, int) or after < 0:
            raise ValueError(f"after is a chunk number (an integer from 0), not {after!r}")
        if not 1 <= limit <= READ_LIMIT:
            raise ValueError(f"limit is from 1 to {READ_LIMIT}, not {limit!r}")
        execution = self.get(execution_id, ("status",))
        finished = execution.status in TERMINAL
        rows = self.storage.chunks(execution_id, stream_id, after, limit)
        chunks = [{"seq": row.seq, "chunk": row.chunk, "at": row.at} for row in rows]
        return {"chunks": chunks, "done": finished and len(chunks) < limit}

    def stream_ids(self: Engine, execution_id: str) -> dict[str, int]:
        """The execution's streams: ``{stream_id: last seq}``, by stream id."""
        return dict(sorted(self.storage.stream_ids(execution_id).items()))
