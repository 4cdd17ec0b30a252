"""A compiled document, run as a workflow function on ``ctx``: the engine's steps do the work.

Replayed from the top on every delivery like any workflow: ``machine.Run`` walks the
transitions from journaled values only, so each delivery reaches the same records. Two
deliveries of one execution at once are the engine's story: only the one holding the lease
writes (every record, trace records included, is fenced by it).

- ``work`` with a task: ``ctx.step.run`` of the registered task on the state's input (key
  ``"<state path>@<visit>"``); a failure goes to ``catch`` with ``data = {"error": ...}``.
- ``work`` with a DAG: wave by wave; a wave of one node is a ``run`` step, a wave of several
  is one ``ctx.step.map`` whose items (one journal record each) run concurrently on the
  workers. A node's value is journaled when it completes, so a resumed run never computes
  it again; ``checkpoint: true`` names the nodes the document relies on for that.
- ``choose`` evaluates its guards (pure: nothing to journal); ``flow`` enters its scope;
  a nested ``final`` leaves it for the flow's ``then``; the top ``final`` returns ``data``.
- ``on`` waits with the engine's event waits and timers (``ctx.step.wait_for_event``).
- A task this worker does not have stalls the run (``UNKNOWN_TASK``), as an unknown workflow
  does: it is tried again until the deploy brings the task, or ``retry()`` resumes it.
- Every transition and every node completion is a **trace record** in the journal (kind
  ``trace``, key ``$trace:<n>``, numbered in the run's order), written once: a replay finds it
  recorded. A delivery writes its new trace records together, in one write when it ends
  (suspends, fails or completes), not one write per transition: a crash before that write
  loses nothing, as the next delivery replays the same transitions and writes them then.
"""

from __future__ import annotations

import hashlib
from typing import Any

from durableflow import exceptions, values
from durableflow.documents import waiting
from durableflow.documents.expressions import evaluate
from durableflow.documents.machine import Dag, Run, Transition
from durableflow.documents.tasks import TaskDefinition, tasks
from durableflow.engine.context import delivery_of
from durableflow.engine.faults import StorageFault
from durableflow.engine.records import LeaseLost, StepConflict, StepRecordData
from durableflow.engine.states import StepStatus

__all__ = ["run", "run_node", "step_key", "TRACE"]

TRACE = "trace"
_MAX_KEY = 200  # room under the journal's 255 for the suffixes of a DAG's records


def run(ctx: Any, compiled: dict[str, Any], params: Any) -> Any:
    """Run ``compiled`` (a revision's compiled form) on ``ctx`` with ``params`` as ``input``."""
    machine = Run(compiled, params)
    trace = Tracer(ctx, machine)
    try:
        return _walk(ctx, machine, trace)
    finally:
        trace.flush()


def _walk(ctx: Any, machine: Run, trace: Tracer) -> Any:
    trace.transition(machine.begin())
    states = machine.states
    transition: Transition | None
    while True:
        state = states[machine.current]
        kind = state["kind"]
        if kind == "work":
            transition = _work(ctx, machine, state, trace)
        elif kind == "choose":
            transition = machine.choose(state)
        elif kind == "on":
            transition = waiting.wait(ctx, machine, state, step_key(state, machine.visit()))
        elif kind == "flow":
            transition = machine.flow(state)
        else:
            transition = machine.final(state)
            if transition is None:
                return machine.result
        trace.transition(machine.enter(transition))


def step_key(state: dict[str, Any], visit: int) -> str:
    """The journal key of a state's step at a visit: ``"check@2"``; long paths end in a hash."""
    key = f"{state['path']}@{visit}"
    if key.startswith("$"):
        key = "~" + key  # "$" keys are the engine's; "~" cannot start an escaped state name
    if len(key) > _MAX_KEY:
        digest = hashlib.sha1(state["path"].encode()).hexdigest()[:16]
        key = f"{key[:_MAX_KEY - 40]}~h{digest}@{visit}"
    return key


class Tracer:
    """Writes the trace records, numbered in the order the run makes them."""

    def __init__(self, ctx: Any, machine: Run):
        self.ctx = ctx
        self.delivery = delivery_of(ctx)
        self.machine = machine
        self.count = 0
        self.pending: list[StepRecordData] = []

    def transition(self, transition: Transition) -> None:
        states = self.machine.states
        source = None if transition.source is None else states[transition.source]["path"]
        target = states[transition.target]["path"]
        self.record({"type": "transition", "from": source, "to": target, "by": transition.by,
                     "visit": self.machine.visit(transition.target)})  # fmt: skip

    def node(self, state: dict[str, Any], name: str, node: dict[str, Any], status: str) -> None:
        self.record({"type": "node", "state": state["path"], "visit": self.machine.visit(), "node": name,
                     "task": node["task"], "checkpoint": node["checkpoint"], "status": status})  # fmt: skip

    def record(self, value: dict[str, Any]) -> None:
        self.count += 1
        key = f"$trace:{self.count}"
        if self.delivery.reach(key, TRACE) is None:
            now = self.delivery.journal.now()
            self.pending.append(StepRecordData(key=key, kind=TRACE, status=StepStatus.COMPLETED, attempts=1,
                                               value=value, started_at=now, finished_at=now))  # fmt: skip

    def flush(self) -> None:
        """Write the new trace records in one fenced write, unless the lease is known lost (a
        conflicting or fenced-out delivery writes nothing more; its successor will) or the
        database failed (the delivery ends; the next one writes them)."""
        if not self.pending or isinstance(self.ctx.interrupt, (LeaseLost, StepConflict, StorageFault)):
            return
        pending, self.pending = self.pending, []
        self.delivery.write_many(pending)


# work ---------------------------------------------------------------------------------------


def _work(ctx: Any, machine: Run, state: dict[str, Any], trace: Tracer) -> Transition:
    key = step_key(state, machine.visit())
    work_input = machine.work_input(state)
    try:
        if "task" in state["work"]:
            result = _task(ctx, key, state, work_input)
        else:
            result = _dag(ctx, key, machine, state, work_input, trace)
    except exceptions.DocumentError:
        raise  # the document's own (an expression that fails on the data): not a task failure
    except Exception as exc:
        if ctx.interrupt is not None or isinstance(exc, exceptions.NonDeterminismError):
            raise  # the engine's control flow, not the task's failure
        recorded = values.encode_error(exc)  # its code and message, as storable text
        error = {"code": recorded["code"], "message": recorded["message"], "state": state["path"],
                 **getattr(exc, "__durableflow_node__", {})}  # fmt: skip
        caught = machine.failed(state, error)
        if caught is None:
            raise
        return caught
    return machine.worked(state, result)


def _task(ctx: Any, key: str, state: dict[str, Any], work_input: Any) -> Any:
    work = state["work"]
    task = _registered(work["task"], work["version"])
    if work.get("with") is not None:
        scope = {"input": work_input, "nodes": {}}
        work_input = evaluate(work["with"], scope, f"{state['pointer']}/work/with")
    return ctx.step.run(key, task.fn, work_input, retry=task.retry)


def _dag(ctx: Any, key: str, machine: Run, state: dict[str, Any], work_input: Any, trace: Tracer) -> Any:
    dag = Dag(machine.compiled["dags"][state["work"]["dag"]], work_input)
    nodes = dag.dag["nodes"]
    for number, wave in enumerate(dag.waves):
        for name in wave:
            _registered(nodes[name]["task"], nodes[name]["version"])
        inputs = [dag.node_input(name) for name in wave]
        try:
            if len(wave) == 1:
                node = nodes[wave[0]]
                task = _registered(node["task"], node["version"])
                results = [ctx.step.run(f"{key}/{wave[0]}", task.fn, inputs[0], retry=task.retry)]
            else:
                items = [{"task": nodes[n]["task"], "version": nodes[n]["version"], "input": i}
                         for n, i in zip(wave, inputs, strict=True)]  # fmt: skip
                results = ctx.step.map(f"{key}/wave-{number + 1}", run_node, items)
        except Exception as exc:
            failed = wave[0] if len(wave) == 1 else _failed_item(ctx, f"{key}/wave-{number + 1}", wave)
            if failed is not None:
                exc.__durableflow_node__ = {"node": failed}  # type: ignore[attr-defined]
            raise
        for name, value in zip(wave, results, strict=True):
            dag.done(name, value)
            trace.node(state, name, nodes[name], "completed")
    return dag.output()


def _failed_item(ctx: Any, key: str, wave: list[str]) -> str | None:
    """Which node of a wave failed: the first item whose record says so."""
    delivery = delivery_of(ctx)
    for index, name in enumerate(wave):
        record = delivery.records.get(f"{key}[{index}]")
        if record is not None and record.status == "failed":
            return name
    return None


def run_node(item: dict[str, Any]) -> Any:
    """A DAG node's task, run as a ``map`` item on any worker: the registered task by name and
    version (never a function named by the document)."""
    return _registered(item["task"], item["version"]).fn(item["input"])


def _registered(name: str, version: str) -> TaskDefinition:
    task = tasks.get(name, version)
    if task is None:
        # Like an unknown workflow: this worker lacks the code (a deploy in progress?). The
        # run stalls and is tried again, rather than failing for good.
        raise exceptions.NonDeterminismError(
            "UNKNOWN_TASK",
            f"this worker has no task {name!r} version {version!r}: deploy the module that registers it "
            "(@durableflow.task), or cancel the execution",
        )
    return task
