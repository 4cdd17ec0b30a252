"""One run of a compiled document, as pure state: where it is, what it has seen, where it goes.

``Run`` holds the scope the expressions read (``{input, data, event, results, visits}``) and
decides each transition from it: which choice a ``choose`` takes, which branch an event takes,
where a work state goes with its result or its error, where a final state leaves its flow.
It never touches the journal: the interpreter feeds it journaled values (task results,
event payloads), so a replay walks the same transitions and finds the same records.

``Dag`` does the same for DAG work: the inputs of each wave's nodes from the values the
earlier waves produced, and the work's result from its output node.
"""

from __future__ import annotations

from typing import Any

from durableflow import exceptions
from durableflow.documents.expressions import evaluate, truthy
from durableflow.documents.pointers import join

__all__ = ["Run", "Dag", "Transition", "DEFAULT_INPUT"]

DEFAULT_INPUT = "data"


class Transition:
    """From one state to another, and why (``then``, ``catch``, ``choose/0``, ``otherwise``,
    ``on/1``, ``after``, ``flow``, ``exit``, ``start``)."""

    __slots__ = ("source", "target", "by")

    def __init__(self, source: int | None, target: int, by: str):
        self.source, self.target, self.by = source, target, by


class Run:
    def __init__(self, compiled: dict[str, Any], params: Any):
        self.compiled = compiled
        self.states: list[dict[str, Any]] = compiled["states"]
        self.scope: dict[str, Any] = {"input": params, "data": params, "event": None, "results": {}, "visits": {}}
        self.current: int = compiled["initial"]  # the state entered last (``begin`` enters this one)

    # moving -------------------------------------------------------------------------------

    def begin(self) -> Transition:
        return self.enter(Transition(None, self.compiled["initial"], "start"))

    def enter(self, transition: Transition) -> Transition:
        """Count the visit to the target (``VISIT_LIMIT_EXCEEDED`` past its limit) and move there."""
        state = self.states[transition.target]
        visits = self.scope["visits"]
        count = visits.get(state["path"], 0) + 1
        limit = state.get("limit")
        if limit is not None and count > limit:
            raise exceptions.DocumentError(
                "VISIT_LIMIT_EXCEEDED",
                f"state {state['path']!r} was entered {count} times, over its limit of {limit}"
                + (f" (from {self.states[transition.source]['path']!r})" if transition.source is not None else ""),
                pointer=state["pointer"],
                state=state["path"],
            )
        visits[state["path"]] = count
        self.current = transition.target
        return transition

    def visit(self, index: int | None = None) -> int:
        """How many times the state (default: the current one) was entered so far."""
        state = self.states[self.current if index is None else index]
        return self.scope["visits"].get(state["path"], 0)

    # deciding -----------------------------------------------------------------------------

    def work_input(self, state: dict[str, Any]) -> Any:
        return evaluate(state.get("input") or DEFAULT_INPUT, self.scope, f"{state['pointer']}/input")

    def worked(self, state: dict[str, Any], result: Any) -> Transition:
        """A work state's result becomes ``data`` (and ``results[path]``); on to ``then``."""
        self.scope["data"] = result
        self.scope["results"][state["path"]] = result
        return Transition(self.current, state["then"], "then")

    def failed(self, state: dict[str, Any], error: dict[str, Any]) -> Transition | None:
        """A task failure: ``data`` becomes ``{"error": ...}`` and the run goes to ``catch``;
        None when the state has no catch (the failure fails the run)."""
        if state.get("catch") is None:
            return None
        data = {"error": error}
        self.scope["data"] = data
        self.scope["results"][state["path"]] = data
        return Transition(self.current, state["catch"], "catch")

    def choose(self, state: dict[str, Any]) -> Transition:
        """The first choice whose guard holds, else ``otherwise``."""
        for n, choice in enumerate(state["choose"]):
            if truthy(evaluate(choice["guard"], self.scope, f"{state['pointer']}/choose/{n}/guard")):
                return Transition(self.current, choice["to"], f"choose/{n}")
        return Transition(self.current, state["otherwise"], "otherwise")

    def event_types(self, state: dict[str, Any]) -> list[str]:
        """The event types an ``on`` state waits for, in the order its branches name them."""
        return list(dict.fromkeys(branch["event"] for branch in state["on"]))

    def event(self, state: dict[str, Any], event_type: str, payload: Any) -> Transition | None:
        """The first branch for ``event_type`` whose guard holds over the scope with this
        event as ``event``; None if none does (the event is ignored). ``event`` stays set
        for the next states only when a branch takes it."""
        candidate = {"type": event_type, "payload": payload}
        scope = {**self.scope, "event": candidate}
        for n, branch in enumerate(state["on"]):
            if branch["event"] != event_type:
                continue
            guard = branch.get("guard")
            if guard is None or truthy(evaluate(guard, scope, f"{state['pointer']}/on/{n}/guard")):
                self.scope["event"] = candidate
                return Transition(self.current, branch["to"], f"on/{n}")
        return None

    def timed_out(self, state: dict[str, Any]) -> Transition:
        return Transition(self.current, state["after"]["to"], "after")

    def flow(self, state: dict[str, Any]) -> Transition:
        return Transition(self.current, state["initial"], "flow")

    def final(self, state: dict[str, Any]) -> Transition | None:
        """A nested final state leaves its flow for the flow's ``then``; None at the top: done."""
        exit_to = state.get("exit")
        return None if exit_to is None else Transition(self.current, exit_to, "exit")

    @property
    def result(self) -> Any:
        return self.scope["data"]


class Dag:
    """The node inputs of one DAG work's activation, wave by wave."""

    def __init__(self, compiled_dag: dict[str, Any], work_input: Any):
        self.dag = compiled_dag
        self.input = work_input
        self.values: dict[str, Any] = {compiled_dag["input"]: work_input}

    @property
    def waves(self) -> list[list[str]]:
        return self.dag["waves"]

    def node_input(self, name: str) -> Any:
        node = self.dag["nodes"][name]
        before = node["after"]
        if node.get("with") is not None:
            scope = {"input": self.input, "nodes": {b: self.values[b] for b in before}}
            return evaluate(node["with"], scope, join(self.dag["pointer"], "nodes", name, "with"))
        if len(before) == 1:
            return self.values[before[0]]
        return {b: self.values[b] for b in before}

    def done(self, name: str, value: Any) -> None:
        self.values[name] = value

    def output(self) -> Any:
        return self.node_input(self.dag["output"])
