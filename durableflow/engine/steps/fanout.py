"""``ctx.step.map`` and ``ctx.step.run(queue=)``: step bodies run as their own Celery tasks.

The delivery writes the step's record, counting its items, and one ``item`` record per body to
run (see ``durableflow.engine.items``) in one fenced transaction, publishes the item tasks in a
few batches once it commits, and suspends: the execution holds no worker while they run. The item
that finishes last wakes it, in the write that records it; its next delivery finds every item
record in the journal it claimed and gathers the results, in item order, into one write.
"""

from __future__ import annotations

from typing import Any, Callable

from durableflow import exceptions, values
from durableflow.engine import names
from durableflow.engine.context import MAX_KEY_LENGTH
from durableflow.engine.items import ITEM, LIMITED, STEP, function_path, item_error
from durableflow.engine.records import StepRecordData
from durableflow.engine.states import STEP_FINISHED, StepStatus
from durableflow.engine.steps.base import StepBase, started_at
from durableflow.engine.storage import LEFT

__all__ = ["FanoutSteps", "item_key", "attempt_key"]

_DONE = STEP_FINISHED
FIRST_BATCH = 4  # item messages in the first batch published (see _batches)


def item_key(key: str, index: int) -> str:
    """The record of item ``index`` of the map at ``key``."""
    return f"{key}[{index}]"


def attempt_key(key: str, attempt: int) -> str:
    """The record of attempt ``attempt`` of the ``run(queue=)`` step at ``key``."""
    return f"{key}@{attempt}"


class FanoutSteps(StepBase):
    def map(
        self,
        key: str,
        fn: Callable[[Any], Any],
        items: Any,
        *,
        queue: str | None = None,
        max_concurrency: int | None = None,
    ) -> list[Any]:
        """``[fn(item) for item in items]``, each call as its own Celery task on ``queue``.

        Returns the results in item order once all are done. A failed item raises its error
        here, after the others finished. ``max_concurrency`` bounds how many run at once.
        """
        delivery = self._delivery
        if not isinstance(key, str):
            raise TypeError("ctx.step.map() needs a step key first")
        key, _ = delivery.key((key,))
        path = function_path(fn)
        if max_concurrency is not None and (
            isinstance(max_concurrency, bool) or not isinstance(max_concurrency, int) or max_concurrency < 1
        ):
            raise ValueError("max_concurrency must be a positive integer")
        items = list(items)
        if len(item_key(key, max(len(items) - 1, 0))) > MAX_KEY_LENGTH:
            raise exceptions.WorkflowValueError(
                "INVALID_STEP_KEY", f"map key {key[:40]!r}...: too long to name its {len(items)} items"
            )
        replayed = delivery.replayed(key, "map")
        if replayed.done:
            return replayed.value
        if replayed.record is not None:
            return self._gather(key, replayed.record)
        delivery.go_live()
        now = delivery.journal.now()
        try:
            _, inputs = values.roundtrip(items, max_bytes=delivery.settings.max_payload_bytes)
        except exceptions.WorkflowValueError as exc:
            exc.message = f"map {key!r}: the items are not durable values: {exc.message}"
            return self._record_failure("map", key, None, 1, exc, now)
        if not inputs:
            delivery.record_live(key, "map", [], attempts=1, meta={"fn": path, "items": 0})
            return []
        queue = queue or delivery.journal.queue
        window = len(inputs) if max_concurrency is None else max_concurrency
        meta = {"fn": path, "items": len(inputs), "queue": queue, "max_concurrency": max_concurrency, LEFT: len(inputs)}
        shared = {"fn": path, "queue": queue, STEP: key, **({LIMITED: True} if window < len(inputs) else {})}
        records = [
            StepRecordData(
                key=item_key(key, index),
                kind=ITEM,
                status=StepStatus.WAITING,
                meta={**shared, "input": item},
                started_at=now if index < window else None,  # None: not sent yet (max_concurrency)
            )
            for index, item in enumerate(inputs)
        ]
        self._fan_out(
            StepRecordData(key=key, kind="map", status=StepStatus.WAITING, meta=meta, started_at=now), records
        )
        raise delivery.suspend(None, {"kind": "task", "step": key, "items": len(inputs)})

    def _gather(self, key: str, record: StepRecordData) -> list[Any]:
        delivery = self._delivery
        found = [delivery.records.get(item_key(key, index)) for index in range(record.meta["items"])]
        items = [item for item in found if item is not None and item.status in _DONE]
        if len(items) < len(found):
            raise delivery.suspend(None, {"kind": "task", "step": key, "items": len(found)})
        failed = next((item for item in items if item.status == StepStatus.FAILED), None)
        if failed is not None:
            error = item_error(failed)
            return self._record_failure("map", key, record, 1, error, record.started_at)
        value = [item.value for item in items]
        delivery.go_live()
        meta = {name: field for name, field in record.meta.items() if name != LEFT}
        delivery.record_live(key, "map", value, attempts=1, meta=meta, started_at=record.started_at)
        return value

    def _run_remote(
        self, key, record, fn, fn_args, kwargs, queue, retry, schema, timeout, compensable=False, *, carry=None
    ) -> Any:
        """``run(queue=)``: each attempt is an item on ``queue``; retries wait durably, as for ``run``."""
        delivery = self._delivery
        if record is not None and record.status == StepStatus.WAITING:
            sent = record.meta.get("task")
            if sent is not None:
                attempt = delivery.records.get(attempt_key(key, sent))
                if attempt is None or attempt.status not in _DONE:
                    raise delivery.suspend(None, {"kind": "task", "step": key, "attempt": sent, "queue": queue})
                started = started_at(record, record.started_at)
                if attempt.status == StepStatus.COMPLETED:
                    value = attempt.value
                    return self._succeeded(key, record, sent, value, schema, started, compensable, carry=carry)
                return self._failed_attempt(key, record, sent, item_error(attempt), retry, started, carry=carry)
            self._wait_until_due(key, record)  # a retry: suspends until the next attempt is due
        path = function_path(fn)
        number = (record.attempts if record else 0) + 1
        delivery.go_live()
        now = delivery.journal.now()
        try:
            _, arguments = values.roundtrip(
                {"args": list(fn_args), "kwargs": kwargs}, max_bytes=delivery.settings.max_payload_bytes
            )
        except exceptions.WorkflowValueError as exc:
            exc.message = f"step {key!r}: the arguments of a step on a queue must be durable values: {exc.message}"
            return self._record_failure("run", key, record, number, exc, now, carry=carry)
        step = StepRecordData(
            key=key,
            kind="run",
            status=StepStatus.WAITING,
            attempts=number - 1,
            meta={**(carry or {}), "task": number, "queue": queue, LEFT: 1},
            started_at=started_at(record, now),
        )
        body = StepRecordData(
            key=attempt_key(key, number),
            kind=ITEM,
            status=StepStatus.WAITING,
            meta={"fn": path, "input": arguments, "spread": True, "queue": queue, "timeout": timeout, STEP: key},
            started_at=now,
        )
        self._fan_out(step, [body], new=record is None)
        raise delivery.suspend(None, {"kind": "task", "step": key, "attempt": number, "queue": queue})

    def _fan_out(self, step: StepRecordData, bodies: list[StepRecordData], *, new: bool = True) -> None:
        """Record ``step`` (its meta counts its items: ``LEFT``) and their records together, and
        publish the first items in a few batches once that commits."""
        ctx = self._ctx
        delivery = self._delivery
        storage = delivery.journal.storage
        sent: dict[str, list[tuple]] = {}
        for body in bodies:
            if body.started_at is not None:
                sent.setdefault(body.meta["queue"], []).append((ctx.execution_id, body.key))
        with storage.atomic():
            delivery.write(step, new=new)
            delivery.write_many(bodies)
            for queue, messages in sent.items():
                for batch in _batches(messages):
                    storage.enqueue_many(names.RUN_ITEM, batch, queue)


def _batches(messages: list[tuple]) -> list[list[tuple]]:
    """``messages`` in batches that double (4, 8, 16...): each is published as one (one producer,
    one pipeline) as soon as the one before; a small first batch lets the other workers start on
    the first items while this process publishes the rest, and a large map costs a few batches."""
    batches, start, size = [], 0, FIRST_BATCH
    while start < len(messages):
        batches.append(messages[start : start + size])
        start, size = start + size, size * 2
    return batches
