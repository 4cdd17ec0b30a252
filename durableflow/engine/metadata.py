"""``ctx.metadata``: an execution's live metadata (progress, counters), changed by its workflows.

    ctx.metadata.set("stage", "packing")
    ctx.metadata.increment("done", target="parent")     # a child counts itself on its parent
    ctx.metadata.append("log", {"step": "charge", "ok": True}, target="root")
    ctx.metadata.remove("stage")

Each change is a journaled step of its own (reserved key ``$metadata:<n>``, the n-th change
the execution makes): one transaction locks the target's row, computes the new metadata,
inserts the record (fenced by the lease: only this delivery's own, ``Journal.write_exclusive``)
and writes the metadata. A replay finds the record and applies nothing, so a change is applied
exactly once however often its workflow replays (after a crash, say). ``target`` is the
execution itself (``"self"``), its parent or its root; the target's row is updated in the same
transaction. Metadata is visible live in the admin and the API (``Execution.metadata``).

A change that cannot apply (``increment`` of a value that is not a number, ``append`` to one
that is not a list) is recorded as failed and raises ``WorkflowValueError("INVALID_METADATA")``
at that call, on the first run and on every replay alike.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from durableflow import exceptions, values
from durableflow.engine.records import StepRecordData
from durableflow.engine.states import StepStatus

if TYPE_CHECKING:
    from durableflow.engine.context import Context

__all__ = ["Metadata", "KIND", "PREFIX", "TARGETS", "apply_change", "replay_changes"]

KIND = "metadata"
PREFIX = "$metadata:"
TARGETS = ("self", "parent", "root")
MAX_KEY = 200


def _invalid(message: str) -> exceptions.WorkflowValueError:
    return exceptions.WorkflowValueError("INVALID_METADATA", message)


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def apply_change(metadata: dict[str, Any], op: str, key: str, arg: Any = None) -> tuple[dict[str, Any], Any]:
    """The metadata after one change, and what the change returns (``increment``: the new number)."""
    changed = dict(metadata)
    if op == "set":
        changed[key] = arg
        return changed, None
    if op == "increment":
        current = changed.get(key, 0)
        if not _number(current):
            raise _invalid(f"metadata {key!r} is {current!r}, not a number: it cannot be incremented")
        changed[key] = current + arg
        return changed, changed[key]
    if op == "append":
        current = changed.get(key)
        if current is not None and not isinstance(current, list):
            raise _invalid(f"metadata {key!r} is {current!r}, not a list: nothing can be appended to it")
        changed[key] = [*(current or []), arg]
        return changed, None
    if op == "remove":
        changed.pop(key, None)
        return changed, None
    raise ValueError(f"unknown metadata change {op!r}")  # pragma: no cover - the methods name it


def replay_changes(records: list[StepRecordData], execution_id: str) -> dict[str, Any]:
    """The metadata that the applied changes among ``records`` wrote to ``execution_id`` (a fork's start)."""
    metadata: dict[str, Any] = {}
    for record in records:
        meta = record.meta or {}
        if record.kind == KIND and record.status == StepStatus.COMPLETED and meta.get("applied_to") == execution_id:
            metadata, _ = apply_change(metadata, meta["op"], meta["key"], meta.get("arg"))
    return metadata


class Metadata:
    """``ctx.metadata``. Every method takes ``target="self"`` (or ``"parent"``, ``"root"``)."""

    def __init__(self, ctx: Context):
        from durableflow.engine.context import delivery_of

        self._ctx = ctx
        self._delivery = delivery_of(ctx)

    def set(self, key: str, value: Any, target: str = "self") -> None:
        """Set ``key`` to ``value`` (a durable value)."""
        self._change("set", key, target, value)

    def increment(self, key: str, by: int | float = 1, target: str = "self") -> int | float:
        """Add ``by`` to ``key`` (a missing key counts from 0); return the new number."""
        if not _number(by) or not math.isfinite(by):
            raise TypeError("increment(key, by=...) needs a finite number")
        return self._change("increment", key, target, by)

    def append(self, key: str, value: Any, target: str = "self") -> None:
        """Append ``value`` to the list at ``key`` (a missing key starts one)."""
        self._change("append", key, target, value)

    def remove(self, key: str, target: str = "self") -> None:
        """Remove ``key`` (a missing key is no error)."""
        self._change("remove", key, target)

    def _target(self, target: str) -> str:
        ctx = self._ctx
        if target not in TARGETS:
            raise _invalid(f"target must be one of {', '.join(TARGETS)}, not {target!r}")
        if target == "parent":
            if ctx.parent_id is None:
                raise _invalid(f"execution {ctx.execution_id} has no parent to change the metadata of")
            return ctx.parent_id
        return ctx.root_id if target == "root" else ctx.execution_id

    def _change(self, op: str, key: str, target: str, arg: Any = None) -> Any:
        ctx = self._ctx
        delivery = self._delivery
        if not isinstance(key, str) or not key or len(key) > MAX_KEY or values.text_fault(key):
            raise _invalid(f"a metadata key is a non-empty string of at most {MAX_KEY} characters, not {key!r}")
        target_id = self._target(target)
        if op in ("set", "append"):
            arg = values.roundtrip(arg, code="INVALID_METADATA", max_bytes=delivery.settings.max_payload_bytes)[1]
        delivery.metadata_calls += 1
        step = f"{PREFIX}{delivery.metadata_calls}"
        change = {"op": op, "key": key, "target": target, "applied_to": target_id}
        if op != "remove":
            change["arg"] = arg
        record = delivery.reach(step, KIND)
        if record is not None:
            if (record.meta.get("op"), record.meta.get("key")) != (op, key):
                raise delivery.latch(
                    exceptions.NonDeterminismError(
                        "NON_DETERMINISM",
                        f"Execution {ctx.execution_id} recorded metadata change {step!r} as "
                        f"{record.meta.get('op')} {record.meta.get('key')!r} where {op} {key!r} was expected. "
                        "Check that the workflow is deterministic and was not changed under a running execution.",
                        step=step,
                    )
                )
            if record.status == StepStatus.FAILED:
                delivery.raise_recorded(record)
            return record.value
        delivery.go_live()
        journal = delivery.journal
        storage, now = journal.storage, journal.now()
        failure = None
        with storage.atomic():
            # The target's row is locked first: concurrent changes (ten children counting on
            # their parent) apply one after the other, none lost.
            current = storage.lock_metadata(target_id)
            try:
                if current is None:
                    raise _invalid(f"execution {target_id} (the {target}) does not exist any more")
                changed, value = apply_change(current, op, key, arg)
                values.encode(changed, code="INVALID_METADATA", max_bytes=delivery.settings.max_payload_bytes)
            except exceptions.WorkflowValueError as exc:
                failure, value = exc, None
            record = StepRecordData(
                key=step,
                kind=KIND,
                status=StepStatus.COMPLETED if failure is None else StepStatus.FAILED,
                attempts=1,
                value=value,
                error=None if failure is None else values.encode_error(failure, step=step),
                meta=change,
                started_at=now,
                finished_at=now,
            )
            # Only this delivery's own insert may apply the change (a rejected one rolls back).
            delivery.write_exclusive(record, None)
            if failure is None:
                storage.update_execution(target_id, {"metadata": changed})
        if failure is not None:
            delivery.raise_recorded(record, cause=failure)
        return value
