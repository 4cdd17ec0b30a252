"""New executions made from finished ones: ``rerun`` (same params, a fresh journal) and
``fork`` (the journal before a step kept, that step and what follows run anew).

Both start the new execution with the engine's ``start`` (its delivery is sent when the
transaction commits) and link it to its origin (``origin_id``, ``origin_kind``, and for a fork
``origin_step``). The origin stays as it is. Both act on finished executions only, so that a
journal is never copied while a delivery still writes it, and a rerun never runs beside the
run it repeats: an unfinished one is refused with ``NOT_FINISHED`` (cancel it, or wait).

A fork copies the origin's finished records written before ``from_step`` (in journal order)
into the new execution's journal, in the transaction that creates it: its replay returns
their values without running their bodies, and every step from ``from_step`` on runs again.
It keeps the origin's random seed (``ctx.random()``/``ctx.uuid()`` draw the same values on
the kept steps' way), and its metadata is what the kept journal wrote to the origin itself.
Compensations the origin ran are not copied: the fork's own ending decides its own. The
records of children, effects, waits and stores are copied as values: a kept ``start`` step
names the origin's child, a kept effect is not performed again.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from durableflow import exceptions
from durableflow.engine import logs, sagas
from durableflow.engine.items import ITEM
from durableflow.engine.metadata import replay_changes
from durableflow.engine.states import STEP_FINISHED, TERMINAL

if TYPE_CHECKING:
    from durableflow.engine.rows import ExecutionRow
    from durableflow.engine.verbs import Engine

__all__ = ["Lineage"]

logger = logs.logger("durableflow")

_KEPT = STEP_FINISHED


class Lineage:
    """The ``rerun`` and ``fork`` verbs (a mixin of ``Engine``)."""

    def rerun(self: Engine, execution_id: str) -> Any:
        """Start a new execution of the same workflow with the same params, linked to this one."""
        with self.storage.atomic():
            origin = self._finished_origin(execution_id, "rerun")
            new, _ = self.start(origin.workflow, origin.params, queue=origin.queue)
            self.storage.update_execution(new.id, {"origin_id": origin.id, "origin_kind": "rerun"})
            made = self.get(new.id)
        logger.info("execution %s rerun as %s", execution_id, made.id, extra={"execution_id": made.id})
        return made

    def fork(self: Engine, execution_id: str, *, from_step: str) -> Any:
        """Start a new execution that keeps this one's journal before ``from_step`` and runs the rest anew.

        ``from_step`` is a step key recorded in this execution's journal (not a reserved
        ``$...`` key nor a map item): ``UNKNOWN_STEP`` otherwise. ``FORK_VERSION_MISMATCH`` if
        the workflow's registered version is no longer the one this execution ran with (the
        kept journal would not replay).
        """
        with self.storage.atomic():
            origin = self._finished_origin(execution_id, "forked")
            journal = self.storage.steps(origin.id)
            position = next((i for i, record in enumerate(journal) if record.key == from_step), None)
            if (
                not isinstance(from_step, str)
                or position is None
                or from_step.startswith("$")
                or journal[position].kind == ITEM
            ):
                raise exceptions.WorkflowStartError(
                    "UNKNOWN_STEP",
                    f"execution {execution_id} has no step {from_step!r} to fork from: name a step key of its "
                    "journal (not a reserved $... key or a map item)",
                )
            # The fork runs the version its origin ran (its journal replays on that code only).
            definition = self.registry.get(origin.workflow, origin.version)
            if definition is None and self.registry.get(origin.workflow) is not None:
                registered = ", ".join(repr(d.version) for d in self.registry.versions(origin.workflow))
                raise exceptions.WorkflowStartError(
                    "FORK_VERSION_MISMATCH",
                    f"execution {execution_id} ran version {origin.version!r} of workflow {origin.workflow!r}, "
                    f"which is not registered now (registered: {registered}): its journal would not replay. "
                    "Rerun it instead, or register the old version beside the new one to fork it.",
                )
            kept = [r for r in journal[:position] if r.status in _KEPT and r.kind != sagas.KIND]
            new, _ = self.start(definition or origin.workflow, origin.params, queue=origin.queue)
            self.storage.add_steps(new.id, kept)
            self.storage.update_execution(
                new.id,
                {
                    "origin_id": origin.id,
                    "origin_kind": "fork",
                    "origin_step": from_step,
                    "seed": origin.seed or origin.id,
                    "metadata": replay_changes(kept, origin.id),
                    "compensable": any(r.meta.get("compensate") for r in kept),
                },
            )
            made = self.get(new.id)
        logger.info(
            "execution %s forked from step %r as %s (%d records kept)",
            execution_id,
            from_step,
            made.id,
            len(kept),
            extra={"execution_id": made.id},
        )
        return made

    def _finished_origin(self: Engine, execution_id: str, verb: str) -> ExecutionRow:
        origin = self.get(execution_id)
        if origin.status not in TERMINAL:
            raise exceptions.InvalidTransition(
                "NOT_FINISHED",
                f"execution {execution_id} is {origin.status}: only a finished execution can be {verb}. "
                "Wait for it to finish, or cancel it first.",
                status=origin.status,
            )
        return origin
