"""``ctx.step.stream``: write what an iterable yields as a stream's chunks, once.

See ``durableflow.engine.streams`` for how chunks are numbered, replayed and resumed.
"""

from __future__ import annotations

from typing import Any

from durableflow import exceptions
from durableflow.engine import streams
from durableflow.engine.states import StepStatus
from durableflow.engine.steps.base import StepBase

__all__ = ["StreamSteps"]


class StreamSteps(StepBase):
    def stream(self, *args: Any) -> int:
        """``stream(key, stream_id, iterable)``: write each item as the next chunk of ``stream_id``;
        return how many were written.

        Journaled once the iterable is exhausted: a replay returns the count without iterating.
        A delivery that dies mid-stream leaves no record: the next one iterates again, skipping
        the items already stored. An error the iterable raises is raised at this call (nothing
        is recorded: a replay iterates again, and meets it again).
        """
        ctx = self._ctx
        delivery = self._delivery
        key, rest = delivery.key(args)
        if len(rest) != 2:
            raise TypeError("ctx.step.stream(key, stream_id, iterable) needs a stream id and an iterable")
        stream_id, iterable = streams.check_stream_id(rest[0]), rest[1]
        record = delivery.reach(key, streams.KIND)
        if record is not None and record.status == StepStatus.COMPLETED:
            if record.meta.get("stream") != stream_id:
                raise delivery.latch(
                    exceptions.NonDeterminismError(
                        "NON_DETERMINISM",
                        f"Execution {ctx.execution_id} recorded step {key!r} as a stream of "
                        f"{record.meta.get('stream')!r} where a stream of {stream_id!r} was expected. Check that "
                        "the workflow is deterministic and was not changed under a running execution.",
                        step=key,
                    )
                )
            streams.skip(ctx, stream_id, record.value)
            return record.value
        started = delivery.journal.now()
        first, count = streams.consume(ctx, key, stream_id, iterable)
        delivery.go_live()
        delivery.record_live(key, streams.KIND, count, attempts=1, started_at=started,
                         meta={"stream": stream_id, "first": first})  # fmt: skip
        return count
