"""``ctx.patched`` and ``ctx.deprecate_patch``: change the code of a running workflow safely.

A run that sleeps for a week meets next week's deploy, and replays its journal against the
new code. A change put behind ``if ctx.patched("id"):`` runs only where no run can have gone
the old way: ``patched`` records a marker (kind ``patch``, key ``$patch:<id>``) and answers
True when the journal has nothing at that point yet (a new run, or one that had not got that
far) or holds the marker already (a run that took the new branch before); it answers False,
and records nothing, when the journal already holds a record the workflow has not reached in
this replay: the old code went past that point, so the old branch is what it ran.

Once no run that took the old branch is left, ``ctx.deprecate_patch("id")`` replaces the
``if``: the old branch is deleted from the code. Runs holding the marker replay through it;
a run that took the old branch cannot, and stalls with a message that names the patch, so a
deploy that removed the old branch too early loses nothing (deploy the ``patched`` code
again, and the runs go on).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Iterator

from durableflow import exceptions, values
from durableflow.engine import sagas
from durableflow.engine.context import MAX_KEY_LENGTH, delivery_of
from durableflow.engine.items import ITEM

if TYPE_CHECKING:
    from durableflow.engine.context import Context

__all__ = ["KIND", "PREFIX", "patch_key", "patched", "deprecate_patch", "unreached"]

KIND = "patch"
PREFIX = "$patch:"
# Records no workflow code reaches by their own key: a step's items (written with the step), the
# compensations (written by the unwinding) and other patches' markers (a removed deprecate_patch
# leaves its marker behind, which is no work the old code did).
NOT_REACHED = frozenset({ITEM, sagas.KIND, KIND})


def patch_key(patch_id: object) -> str:
    """The journal key of ``patch_id``'s marker; ``INVALID_STEP_KEY`` for an id that cannot be one."""
    if not isinstance(patch_id, str):
        raise TypeError(f"a patch id is a string, not {type(patch_id).__name__}")
    if not patch_id or len(patch_id) > MAX_KEY_LENGTH - len(PREFIX):
        raise exceptions.WorkflowValueError(
            "INVALID_STEP_KEY",
            f"patch id {patch_id[:40]!r}: a non-empty string of at most {MAX_KEY_LENGTH - len(PREFIX)} characters",
        )
    fault = values.text_fault(patch_id)
    if fault is not None:
        raise exceptions.WorkflowValueError("INVALID_STEP_KEY", f"patch id {patch_id[:40]!r}: {fault}")
    return PREFIX + patch_id


def patched(ctx: Context, patch_id: str) -> bool:
    """True where the new code runs (its marker is recorded), False where the old code ran."""
    delivery = delivery_of(ctx)
    key = patch_key(patch_id)
    delivery.guard(key)
    known = delivery.patches.get(key)
    if known is not None:  # asked again in the same run: the same answer
        return known
    if key not in delivery.records and _recorded_past(ctx):
        delivery.patches[key] = False
        return False
    _mark(ctx, key, patch_id)
    return True


def deprecate_patch(ctx: Context, patch_id: str) -> None:
    """The old branch of ``patch_id`` is gone from the code: a run that took it stalls here."""
    delivery = delivery_of(ctx)
    key = patch_key(patch_id)
    delivery.guard(key)
    if key in delivery.patches:
        return
    if key not in delivery.records and _recorded_past(ctx):
        raise delivery.latch(
            exceptions.NonDeterminismError(
                "NON_DETERMINISM",
                f"Execution {ctx.execution_id} took the old branch of patch {patch_id!r} (its journal goes on "
                f"past ctx.deprecate_patch({patch_id!r}) without the patch's marker), and this code has removed "
                f"that branch. Deploy the code with `if ctx.patched({patch_id!r}):` and the old branch again until "
                "the executions that took it finish (`manage.py durableflow replay-check` lists them), or cancel "
                "this one.",
                step=key,
            )
        )
    _mark(ctx, key, patch_id)


def _mark(ctx: Context, key: str, patch_id: str) -> None:
    """Reach the marker, recording it if this run has not yet."""
    delivery = delivery_of(ctx)
    record = delivery.reach(key, KIND)
    if record is None:
        delivery.go_live()
        delivery.record_live(key, KIND, None, attempts=1, meta={"patch": patch_id})
    delivery.patches[key] = True


def unreached(ctx: Context) -> list[str]:
    """The journal's work this replay has not reached (in journal order): what the old code did after here."""
    return list(_unreached(ctx))


def _recorded_past(ctx: Context) -> bool:
    return next(_unreached(ctx), None) is not None


def _unreached(ctx: Context) -> Iterator[str]:
    delivery = delivery_of(ctx)
    seen = delivery.seen
    return (key for key, record in delivery.records.items() if key not in seen and record.kind not in NOT_REACHED)
