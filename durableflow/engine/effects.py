"""Effects: external operations at most once in effect, the verbs over the storage.

An ``Effect`` row, named by the caller's ``effect_id``, is the project's own record of one
operation in an external system: what was asked (operation and canonical input), whether
its outcome is known (``pending`` / ``settled``) and, once known, its result. The step
method (``durableflow.engine.steps.effects``) runs the protocol of one attempt; every change
of an effect row is decided here:

- **begin**: record a new effect id, or find the known one (settled: its result; another
  operation or input: a mismatch; pending: its outcome is uncertain, look it up first).
- **hold**: before every ``lookup`` and ``perform``, one fenced write takes the effect for
  this delivery: only while the delivery still holds its execution's lease (checked in the
  database, not only in memory) and no other live delivery holds the effect. A delivery
  that lost its lease, or meets another one mid-call, makes no external call.
- **settle**: record the result; the first result stands (a different later one is logged
  as a conflict) and every execution watching the effect is woken.
- **watch**: an execution whose attempt ended uncertain (``perform`` raised, ``lookup``
  said ``unknown`` or raised) or that met the effect held by another delivery parks for
  ``retry_in`` seconds; the watch is registered in the transaction that parks it, so a
  settle either wakes it or is seen by it.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable

from durableflow import exceptions, values
from durableflow.engine import logs
from durableflow.engine.storage import NOW

if TYPE_CHECKING:
    from durableflow.engine.rows import EffectRow
    from durableflow.engine.verbs import Engine

__all__ = [
    "EffectStatus",
    "EffectRequest",
    "Begun",
    "Effects",
    "effect_request",
    "read_lookup",
    "effect_result",
    "MAX_EFFECT_ID_LENGTH",
    "MAX_OPERATION_LENGTH",
]

logger = logs.logger("durableflow.effects")

MAX_EFFECT_ID_LENGTH = 255  # Effect.id
MAX_OPERATION_LENGTH = 200  # Effect.operation


class EffectStatus:
    PENDING = "pending"
    SETTLED = "settled"

    choices = [PENDING, SETTLED]


# What begin found.
NEW, PENDING, SETTLED, MISMATCH = "new", "pending", "settled", "mismatch"
# What a lookup may answer besides SETTLED.
NOT_FOUND, UNKNOWN = "not-found", "unknown"
# What a hold answered.
HELD, BUSY, LOST = "held", "busy", "lost"


@dataclass(frozen=True)
class EffectRequest:
    """A validated ``ctx.step.effect`` descriptor; ``input`` is decoded, ``digest`` names it."""

    effect_id: str
    operation: str
    input: Any
    digest: str
    retry_in: float
    lookup: Callable[[str], Any]
    perform: Callable[[str], Any]


@dataclass(frozen=True)
class Begun:
    status: str  # NEW, PENDING, SETTLED or MISMATCH
    result: Any = None


def effect_request(
    effect_id: Any,
    operation: Any,
    input: Any,  # noqa: A002 - the effect's input, as its request and its row name it
    retry_in: Any,
    lookup: Any,
    perform: Any,
    *,
    max_bytes: int | None = None,
) -> EffectRequest:
    """Validate a descriptor; raise ``WorkflowEffectError("INVALID_EFFECT_REQUEST")`` naming the problem."""

    def invalid(problem: str) -> exceptions.WorkflowEffectError:
        return exceptions.WorkflowEffectError("INVALID_EFFECT_REQUEST", f"effect {effect_id!r}: {problem}")

    if not isinstance(effect_id, str) or not effect_id or len(effect_id) > MAX_EFFECT_ID_LENGTH:
        raise invalid(f"effect_id must be a non-empty string of at most {MAX_EFFECT_ID_LENGTH} characters")
    if "\x00" in effect_id:
        raise invalid("effect_id must not contain NUL characters")
    if not isinstance(operation, str) or not operation or len(operation) > MAX_OPERATION_LENGTH:
        raise invalid(f"operation must be a non-empty string of at most {MAX_OPERATION_LENGTH} characters")
    if isinstance(retry_in, bool) or not isinstance(retry_in, (int, float)) or not math.isfinite(retry_in):
        raise invalid(f"retry_in must be a number of seconds, not {retry_in!r}")
    if retry_in < 0:
        raise invalid(f"retry_in must not be negative (got {retry_in!r})")
    for name, fn in (("lookup", lookup), ("perform", perform)):
        if not callable(fn):
            raise invalid(f"{name} must be a callable taking the effect id, not {type(fn).__name__}")
    try:
        canonical, decoded = values.roundtrip(input, max_bytes=max_bytes)
    except exceptions.WorkflowValueError as exc:
        raise invalid(f"input is not a durable value: {exc.message}") from None
    digest = hashlib.sha256(canonical.encode()).hexdigest()
    return EffectRequest(effect_id, operation, decoded, digest, float(retry_in), lookup, perform)


def effect_result(effect_id: str, value: Any, source: str, *, max_bytes: int | None = None) -> Any:
    """The decoded result, or ``EffectDeliveryError("INVALID_EFFECT_RESULT")`` (never recorded)."""
    try:
        return values.roundtrip(value, max_bytes=max_bytes)[1]
    except exceptions.WorkflowValueError as exc:
        raise exceptions.EffectDeliveryError(
            "INVALID_EFFECT_RESULT",
            f"{source} of effect {effect_id!r} gave a result that is not a durable value ({exc.message}). "
            "Return JSON data; the effect stays pending, and retry() looks it up again once the code is fixed.",
        ) from None


_LOOKUP_FORMS = '{"status": "settled", "result": ...}, {"status": "not-found"} or {"status": "unknown"}'


def read_lookup(effect_id: str, answer: Any, *, max_bytes: int | None = None) -> tuple[str, Any]:
    """``(status, result)`` from a lookup's answer; ``EffectDeliveryError`` if it is malformed."""
    status = answer.get("status") if isinstance(answer, dict) else None
    if status == SETTLED and "result" in answer:
        return SETTLED, effect_result(effect_id, answer["result"], "lookup", max_bytes=max_bytes)
    if status in (NOT_FOUND, UNKNOWN):
        return status, None
    shown = repr(answer)
    raise exceptions.EffectDeliveryError(
        "INVALID_EFFECT_LOOKUP",
        f"lookup of effect {effect_id!r} answered {shown[:200]}{'...' if len(shown) > 200 else ''}; "
        f"it must answer {_LOOKUP_FORMS}. The effect stays pending; retry() looks it up again once fixed.",
    )


class Effects:
    """The effect verbs (a mixin of ``Engine``).

    Concurrency: any number of executions, in any number of processes, may ask for one effect
    id at once. Begin is an insert that one wins (the others read the row); hold is one
    conditional write, so at most one live delivery is between a hold and its settle or
    watch; settle is conditional on ``pending``, so the first result stands.
    """

    def begin_effect(self: Engine, request: EffectRequest, execution_id: str, step_key: str) -> Begun:
        """Record a new effect, or say what the known one is (never calls out)."""
        storage = self.storage
        if storage.create_effect(
            {
                "id": request.effect_id,
                "operation": request.operation,
                "input": request.input,
                "input_digest": request.digest,
                "status": EffectStatus.PENDING,
                "began_by": execution_id,
                "began_step": step_key,
                "attempts": 0,
                "created_at": NOW,
                "updated_at": NOW,
            }
        ):
            return Begun(NEW)
        effect = storage.get_effect(request.effect_id)
        if effect is None:  # pragma: no cover - deleted between the insert and the read
            return self.begin_effect(request, execution_id, step_key)
        if effect.operation != request.operation or effect.input_digest != request.digest:
            return Begun(MISMATCH)
        if effect.status == EffectStatus.SETTLED:
            return Begun(SETTLED, effect.result)
        return Begun(PENDING)

    def hold_effect(self: Engine, effect_id: str, execution_id: str, token: str) -> tuple[str, Any]:
        """Take the effect for this delivery's next call: ``(HELD | BUSY | SETTLED | LOST, result)``.

        One fenced write (it counts the attempt): it matches only while the delivery holds
        the execution's lease, unexpired, and the effect is pending and not held by another
        live delivery. A delivery that gets anything but ``HELD`` must not call out.
        """
        storage = self.storage
        if storage.hold_effect(effect_id, execution_id, token):
            return HELD, None
        effect = storage.get_effect(effect_id)
        if effect is not None and effect.status == EffectStatus.SETTLED:
            return SETTLED, effect.result
        if not storage.holds_lease(execution_id, token):
            logger.warning(
                "effect %r: execution %s lost its lease (token %s); no lookup or perform made",
                effect_id,
                execution_id,
                token,
                extra={"execution_id": execution_id},
            )
            return LOST, None
        # Another live delivery is between its hold and its settle (or this lease just lapsed).
        return BUSY, None

    def settle_effect(self: Engine, effect_id: str, result: Any, execution_id: str) -> Any:
        """Record ``result`` unless a result stands already; return the standing one.

        Wakes the executions watching the effect. Not fenced by a lease: a result the external
        system reported is true whoever reports it, and the first one stands.
        """
        storage = self.storage
        settled = storage.update_effect(
            effect_id,
            {
                "status": EffectStatus.SETTLED,
                "result": result,
                "settled_by": execution_id,
                "settled_at": NOW,
                "updated_at": NOW,
                "holder_id": None,
                "holder_token": None,
            },
            statuses=[EffectStatus.PENDING],
        )
        standing = result
        if not settled:
            effect = storage.get_effect(effect_id)
            standing = result if effect is None else effect.result
            if values.encode(standing) != values.encode(result):
                logger.warning(
                    "effect %r settled again with a different result; the first result stands "
                    "(first: %.300s; later, from execution %s: %.300s)",
                    effect_id,
                    values.encode(standing),
                    execution_id,
                    values.encode(result),
                )
        # A watch is added only while the effect is pending (see watch_effect), so every watch
        # is either seen here or never added.
        watchers = [pk for pk in storage.pop_effect_watches(effect_id) if pk != execution_id]
        if watchers:
            self.wake(watchers)
        return standing

    def watch_effect(self: Engine, effect_id: str, execution_id: str, step_key: str, token: str) -> bool:
        """Register the execution as waiting on a pending effect; False if it is settled already.

        Runs in the transaction that parks the execution (a ``Suspended`` guard). Its first
        write locks the effect row, so a settle running at the same time either committed
        before (nothing matches: the delivery replays at once and finds the result) or waits
        for this park to commit and then wakes it. Gives up this delivery's hold, if any.
        """
        storage = self.storage
        if not storage.update_effect(effect_id, {"updated_at": NOW}, statuses=[EffectStatus.PENDING]):
            return False
        storage.update_effect(effect_id, {"holder_id": None, "holder_token": None}, holder_token=token)
        storage.add_effect_watch(effect_id, execution_id, step_key)
        return True

    def get_effect(self: Engine, effect_id: str) -> EffectRow | None:
        """The effect row, or ``None``."""
        return self.storage.get_effect(effect_id)
