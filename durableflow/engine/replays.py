"""Replay checks: would the code installed now replay a stored journal, or stall?

A check runs the workflow function over a copy of the execution's journal in memory, with the
delivery's own ``Context`` (the same step methods, the same comparisons), and stops at the first
step the journal has not finished: nothing runs live, nothing is written, no storage is even
handed to the replay (``_ReadOnlyJournal`` holds only the claim's clock). What it reports:

- the replay would **stall**: the version the execution started with is not registered, or a
  step is journaled as another kind than the code asks for, or a deprecated patch's old branch
  was taken (``NonDeterminismError``, with the step where it diverges);
- the code would run a **new step before steps the journal already holds** (a step added
  without ``ctx.patched()``, or keys derived from lines that moved): a worker would not stall,
  it would run that step live and replay the rest, which is the change a deploy should not make
  unguarded, so it is reported too;
- else the replay matches (it reached the end of the journal, or the run's end).

The export format (``export``, ``from_export``) is what ``manage.py durableflow export`` writes
and ``durableflow.testing.replay`` reads: the execution's row and its journal as JSON.
"""

from __future__ import annotations

import dataclasses
from datetime import datetime
from types import SimpleNamespace
from typing import Any, Callable, cast

from durableflow import exceptions
from durableflow.engine.context import Context, iso, parse_iso
from durableflow.engine.delivery import Delivery
from durableflow.engine.driver import missing_code
from durableflow.engine.journal import Journal
from durableflow.engine.records import (
    RECORD_FIELDS,
    Claim,
    CompensateRequested,
    ContinueAsNew,
    LeaseLost,
    ReplayEnd,
    StepRecordData,
    Suspend,
)
from durableflow.engine.settings import EngineSettings
from durableflow.engine.steps import patches
from durableflow.registry import Registry, WorkflowDefinition

__all__ = ["Verdict", "replay", "check", "export", "from_export", "FORMAT"]

FORMAT = "durableflow.execution/1"
_EXECUTION_FIELDS = (
    "id", "workflow", "version", "status", "params", "result", "error", "parent_id", "root_id", "seed",
    "queue", "created_at", "finished_at", "waiting_for",
)  # fmt: skip


# How a run's code may end besides returning or raising (see ``durableflow.engine.driver``).
_ENDS = (ContinueAsNew, CompensateRequested, Suspend)


@dataclasses.dataclass(frozen=True)
class Verdict:
    """What a replay check found for one execution."""

    execution_id: str
    workflow: str
    version: str
    status: str
    ok: bool
    replayed: int  # journal records the replay reached
    step: str | None = None  # where it diverges (or stopped, when ok)
    code: str | None = None  # UNKNOWN_WORKFLOW, UNKNOWN_VERSION, NON_DETERMINISM or NEW_STEP
    message: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def error(self) -> exceptions.NonDeterminismError:
        """The divergence as the error a test raises (``durableflow.testing.replay``)."""
        return exceptions.NonDeterminismError(self.code, self.message, step=self.step, execution_id=self.execution_id)


class _ReadOnlyJournal:
    """What a ``Context`` needs from a journal, for a replay that may write nothing."""

    fault = None
    queue = ""
    token = ""

    def __init__(self, claim: Claim):
        self.execution_id, self._now = claim.execution_id, claim.now

    def now(self) -> datetime:
        return self._now

    def lease_lost(self) -> bool:
        return False

    def _refuse(self, *args: Any, **kwargs: Any) -> None:
        raise LeaseLost(self.execution_id)  # latched by the context: the check reports its own bug

    write_step = write_steps = write_exclusive = mark_compensable = _refuse

    @property
    def storage(self):
        raise LeaseLost(self.execution_id)


def claim_of(execution: Any, records: list[StepRecordData], now: datetime) -> Claim:
    """A claim for replaying ``execution`` (a row: attributes) over ``records``: not cancelled
    (a check replays the path the code takes, not its compensations)."""
    return Claim(
        execution_id=execution.id,
        workflow=execution.workflow,
        version=execution.version,
        params=execution.params,
        records={record.key: record for record in records},
        now=now,
        parent_id=execution.parent_id,
        root_id=execution.root_id,
        seed=execution.seed,
    )


def replay(
    claim: Claim,
    registry: Registry,
    settings: EngineSettings | None = None,
    *,
    status: str = "",
    code: WorkflowDefinition | Callable[..., Any] | None = None,
) -> Verdict:
    """Replay ``claim``'s journal against the registered version it started with (or ``code``)."""
    verdict = dict(execution_id=claim.execution_id, workflow=claim.workflow, version=claim.version, status=status)
    if code is None:
        definition = registry.get(claim.workflow, claim.version)
        if definition is None:
            missing = missing_code(claim, registry)
            return Verdict(**verdict, ok=False, replayed=0, code=missing.code, message=missing.message)
        code = definition
    fn = code.fn if isinstance(code, WorkflowDefinition) else getattr(code, "__durableflow__", code)
    fn = fn.fn if isinstance(fn, WorkflowDefinition) else fn
    journal = cast(Journal, _ReadOnlyJournal(claim))  # all that a replay-only delivery reads of one
    delivery = Delivery(claim, journal, settings or EngineSettings(), None, replay_only=True)
    ctx = Context(claim, delivery)
    try:
        fn(ctx, claim.params)
        error: BaseException | None = None
    except BaseException as exc:  # noqa: BLE001 - sorted below; the latch decides first
        error = exc
    if ctx.interrupt is not None:
        error = ctx.interrupt
    replayed = sum(1 for key in delivery.seen if key in claim.records)
    if isinstance(error, LeaseLost):
        raise RuntimeError(f"the replay check of execution {claim.execution_id} tried to write: a bug in durableflow")
    if isinstance(error, exceptions.NonDeterminismError):
        step = error.detail.get("step")
        return Verdict(**verdict, ok=False, replayed=replayed, step=step, code=error.code, message=error.message)
    if isinstance(error, ReplayEnd):
        ahead = [] if error.recorded else patches.unreached(ctx)
        if ahead:
            message = (
                f"Execution {claim.execution_id} now reaches step {error.key!r}, which its journal does not have, "
                f"while the journal goes on with {ahead[0]!r} (recorded by the code it ran before): a worker would run "
                f"{error.key!r} live, then replay the rest. Put the new step behind `if ctx.patched(...)`, or check "
                "that the step keys did not change (keys derived from the line of the call move with it)."
            )
            return Verdict(**verdict, ok=False, replayed=replayed, step=error.key, code="NEW_STEP", message=message)
        return Verdict(**verdict, ok=True, replayed=replayed, step=error.key)
    if error is not None and not isinstance(error, (Exception, *_ENDS)):
        raise error  # KeyboardInterrupt, SystemExit: not the workflow's outcome
    # The run's end under this code (a result, an uncaught error, continue_as_new, compensate).
    return Verdict(**verdict, ok=True, replayed=replayed)


def check(storage: Any, registry: Registry, execution_id: str, settings: EngineSettings | None = None) -> Verdict:
    """Replay the stored journal of ``execution_id`` (reads only: the row and its journal)."""
    execution = storage.get_execution(execution_id)
    if execution is None:
        raise exceptions.ExecutionNotFound(message=f"there is no execution {execution_id!r}")
    claim = claim_of(execution, storage.steps(execution_id), storage.now())
    return replay(claim, registry, settings, status=execution.status)


# Export ---------------------------------------------------------------------------------------


def export(storage: Any, execution_id: str) -> dict[str, Any]:
    """The execution's row (the fields a replay and a reader need) and its journal, as JSON values."""
    execution = storage.get_execution(execution_id)
    if execution is None:
        raise exceptions.ExecutionNotFound(message=f"there is no execution {execution_id!r}")
    row = {name: _plain(getattr(execution, name, None)) for name in _EXECUTION_FIELDS}
    records = storage.steps(execution_id)
    journal = [{name: _plain(getattr(record, name)) for name in RECORD_FIELDS} for record in records]
    return {"format": FORMAT, "execution": row, "journal": journal}


def from_export(data: Any, now: datetime) -> tuple[Claim, str]:
    """The claim to replay an exported execution with, and its status; ``ValueError`` if it is not one."""
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise ValueError(f"not an exported execution (its 'format' must be {FORMAT!r}: manage.py durableflow export)")
    try:
        row = data["execution"]
        records = [
            StepRecordData(
                **{
                    name: (parse_iso(entry[name]) if name.endswith("_at") and entry.get(name) else entry.get(name))
                    for name in RECORD_FIELDS
                }  # type: ignore[arg-type]  # the values as the export holds them
            )
            for entry in data["journal"]
        ]
        for record in records:
            record.meta = record.meta or {}
        execution = SimpleNamespace(**{name: row.get(name) for name in _EXECUTION_FIELDS})
        if not isinstance(execution.id, str) or not isinstance(execution.workflow, str):
            raise TypeError("the execution needs an id and a workflow")
        execution.version = str(execution.version or "1")
    except (KeyError, TypeError, AttributeError) as exc:
        raise ValueError(f"not an exported execution: {exc}") from None
    return claim_of(execution, records, now), execution.status or ""


def _plain(value: Any) -> Any:
    return iso(value) if isinstance(value, datetime) else value
