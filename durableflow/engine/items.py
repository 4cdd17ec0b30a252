"""Step bodies run as their own tasks: ``ctx.step.map`` items and ``ctx.step.run(queue=)``.

The delivery that fans out writes its step's record, with the count of its items (its meta's
``storage.LEFT``), and one journal record per item (kind ``item``: the function's import path,
its input, the queue and the step's key) in one transaction, publishes the item tasks in a few
batches once that commits, and suspends: no worker is held while the items run.

An item task is two writes: its claim (one statement; the attempt count it bumps is the fence)
and, after the body, its outcome (``Storage.record_item``: one statement where the database
allows), which also counts the item off its step's record. That count is serialised by the
record's lock, so of items finishing at the same time exactly one finds none left: it wakes the
execution in that same write, once, and only after every other result is committed. The next
delivery finds them all in the journal it reads with its claim and records the step in one write.
"""

from __future__ import annotations

import importlib
from contextlib import nullcontext
from typing import TYPE_CHECKING, Any, Callable

from durableflow import exceptions, values
from durableflow.engine import faults, logs, names, tracing
from durableflow.engine.states import StepStatus
from durableflow.engine.steering import wake_moves
from durableflow.engine.storage import NOW
from durableflow.engine.timeouts import call_with_timeout

if TYPE_CHECKING:
    from durableflow.engine.verbs import Engine

__all__ = ["Items", "ITEM", "STEP", "LIMITED", "function_path", "resolve_function", "item_error"]

logger = logs.logger("durableflow")

ITEM = "item"
# An item record's meta: the key of the step it belongs to (whose record counts its items), and
# whether that step sends its items a few at a time (``max_concurrency``).
STEP = "step"
LIMITED = "limited"


def function_path(fn: Callable[..., Any]) -> str:
    """``"module:qualname"`` of a function another worker process can import by name."""
    module, qualname = getattr(fn, "__module__", None), getattr(fn, "__qualname__", None)
    if not callable(fn) or not module or not qualname or "<" in qualname or module == "__main__":
        raise TypeError(
            f"{fn!r} runs in another worker process, so it must be a function defined at the top level "
            "of an importable module (not a lambda, a nested function or __main__)"
        )
    return f"{module}:{qualname}"


def resolve_function(path: str) -> Callable[..., Any]:
    module, _, qualname = path.partition(":")
    target: Any = importlib.import_module(module)
    for name in qualname.split("."):
        target = getattr(target, name)
    return target


def item_error(record: Any) -> Exception:
    """The exception an item recorded, rebuilt (with a ``RetryableError``'s own retry settings)."""
    error = values.decode_error(record.error or {})
    retry = (record.meta or {}).get("retry")
    if isinstance(error, exceptions.RetryableError) and retry:
        error = exceptions.RetryableError(
            error.message, max_attempts=retry["max_attempts"], retry_interval=retry["retry_interval"], code=error.code
        )
    return error


class Items:
    """``run_item``: one item task (a mixin of ``Engine``)."""

    def run_item(self: Engine, execution_id: str, key: str) -> str:
        """Run one item's body and record its outcome; wake the execution after the last one.

        Safe to run any number of times at once (a duplicate message, a re-send by the sweep):
        the claim is a compare-and-set that bumps the record's attempt count, and only the
        attempt that claimed last may record an outcome. A body may so run more than once
        (after a crash or a lost message), but its result is recorded once.

        The database failing under it (``faults.FAULT``) ends it without an outcome: the
        connection is dropped and the attempt given back if the database answers again, so
        that the item task sent again runs it at once (the body, then, once more).
        """
        with logs.scope(execution_id=execution_id, workflow=None, step_key=key):
            return self._run_item_once(execution_id, key)

    def _run_item_once(self: Engine, execution_id: str, key: str) -> str:
        running = type(self)(faults.Guarded(self.storage), self.registry, self.settings)
        attempt: list[int] = []
        try:
            return running._run_item(execution_id, key, attempt)
        except faults.StorageFault as fault:
            logger.warning("item %r of execution %s: the database failed under it (%s)", key, execution_id, fault)
        storage = faults.unguarded(self.storage)
        storage.reset()
        try:
            if attempt:  # waiting again, as sent: claimable at once, and re-sent by the sweep if lost
                storage.finish_item(execution_id, key, attempt[0], {"status": StepStatus.WAITING, "started_at": NOW})
        except Exception as exc:
            if not storage.is_fault(exc):
                raise
            storage.reset()
        return faults.FAULT

    def _run_item(self: Engine, execution_id: str, key: str, attempt: list[int]) -> str:
        storage = self.storage
        claimed = storage.claim_item(execution_id, key, self.settings.lease_seconds)
        if claimed is None:
            logger.info(
                "item %r of execution %s skipped: finished, running elsewhere or not runnable", key, execution_id
            )
            return "skipped"
        attempt.append(claimed[0])
        meta = claimed[1]
        try:
            fn = resolve_function(meta["fn"])
        except (ImportError, AttributeError):
            # This worker does not have the code (a deploy in progress?): leave the item to the
            # sweep, which sends it again once its attempt is older than the lease.
            logger.exception("item %r of execution %s: cannot import %s", key, execution_id, meta["fn"])
            return "unavailable"
        if self.settings.step_body is not None:  # a body run as its own task (queue=, map items)
            fn = self.settings.step_body("run", key, fn)
        with tracing.item(execution_id, key, attempt[0]) as span:
            fields = self._perform(fn, meta)
            if fields["status"] == StepStatus.FAILED:
                tracing.failed(span, fields["error"])
        if not self._record(execution_id, key, attempt[0], meta, fields):
            logger.warning("stale item result rejected: %r of execution %s (attempt %d)", key, execution_id, attempt[0])
            return "stale"
        return fields["status"]

    def _record(
        self: Engine, execution_id: str, key: str, attempt: int, meta: dict[str, Any], fields: dict[str, Any]
    ) -> bool:
        """Record the outcome, counted off its step's items; the last item wakes the execution in
        the same write. With ``max_concurrency`` the next item waiting is sent in its transaction
        (the count locks the step's record: items finishing at once pick the next one in turn)."""
        storage = self.storage
        if meta.get(STEP) is None:  # fanned out before items were counted
            return self._record_uncounted(execution_id, key, attempt, fields)
        with storage.atomic() if meta.get(LIMITED) else nullcontext():
            recorded = storage.record_item(execution_id, key, attempt, fields, step=meta[STEP], wake=wake_moves())
            if recorded is None:
                return False
            if recorded.woken is not None:
                self.deliver_woken([(execution_id, *recorded.woken)])
            if meta.get(LIMITED) and recorded.left != 0:
                following = storage.send_next_item(execution_id)
                if following is not None:
                    storage.enqueue(names.RUN_ITEM, (execution_id, following[0]), following[1])
        if recorded.left is None and not storage.items_left(execution_id):
            self.wake([execution_id])  # its step's record counts nothing: as for an uncounted item
        return True

    def _record_uncounted(self: Engine, execution_id: str, key: str, attempt: int, fields: dict[str, Any]) -> bool:
        """An item fanned out before its step counted its items (a run in flight across an upgrade)."""
        storage = self.storage
        with storage.atomic():
            if not storage.finish_item(execution_id, key, attempt, fields):
                return False
            following = storage.send_next_item(execution_id)  # max_concurrency: the next one waiting
            if following is not None:
                storage.enqueue(names.RUN_ITEM, (execution_id, following[0]), following[1])
        # Read after the commit: of items finishing at the same time, the last to commit sees
        # none left, so the execution is woken at least once.
        if not storage.items_left(execution_id):
            self.wake([execution_id])
        return True

    def _perform(self: Engine, fn: Callable[..., Any], meta: dict[str, Any]) -> dict[str, Any]:
        if meta.get("spread"):
            args, kwargs = tuple(meta["input"]["args"]), meta["input"]["kwargs"]
        else:
            args, kwargs = (meta["input"],), {}
        try:
            result = call_with_timeout(fn, args, kwargs, meta.get("timeout"))
            _, value = values.roundtrip(result, max_bytes=self.settings.max_payload_bytes)
        except Exception as exc:  # noqa: BLE001 - recorded, raised into the workflow by its delivery
            fields: dict[str, Any] = {"status": StepStatus.FAILED, "error": values.encode_error(exc)}
            if isinstance(exc, exceptions.RetryableError):
                retry = {"max_attempts": exc.max_attempts, "retry_interval": exc.retry_interval}
                fields["meta"] = {**meta, "retry": retry}
            return {**fields, "finished_at": NOW}
        return {"status": StepStatus.COMPLETED, "value": value, "finished_at": NOW}

    def _resend_items(self: Engine, limit: int) -> int:
        """The sweep's part: send again the items whose message or worker was lost."""
        with self.storage.atomic():
            stale = self.storage.lock_stale_items(self.settings.lease_seconds, limit)
            for execution_id, key, queue in stale:
                self.storage.enqueue(names.RUN_ITEM, (execution_id, key), queue)
        return len(stale)
