"""Workflow documents for the compiler's tests: a valid one, and invalid ones with the code and
JSON pointer each must be refused with.

Each invalid document is the valid one with one thing wrong (or a hostile one built from
scratch), so that a refusal can only come from that one thing.
"""

from __future__ import annotations

import copy
from typing import Any, Callable

TASKS = {("fetch-order", "1"), ("fetch-order", "2"), ("pack", "1"), ("price", "1"), ("stock", "1")}


def has_task(name: str, version: str) -> bool:
    return (name, version) in TASKS


def dag() -> dict[str, Any]:
    return {
        "$dag": "0.1",
        "nodes": {
            "in": {"kind": "input"},
            "price": {"kind": "task", "task": "price", "version": "1", "checkpoint": True},
            "stock": {"kind": "task", "task": "stock", "version": "1"},
            "out": {"kind": "output", "with": "{price: nodes.price, stock: nodes.stock}"},
        },
        "edges": [
            {"from": "in", "to": "price"},
            {"from": "in", "to": "stock"},
            {"from": "price", "to": "out"},
            {"from": "stock", "to": "out"},
        ],
    }


def valid() -> dict[str, Any]:
    """SPEC §8's example, with a nested flow."""
    return {
        "$workflow": "0.2",
        "revision": "r1",
        "initial": "fetch",
        "states": {
            "fetch": {
                "work": {"task": "fetch-order", "version": "1"},
                "input": "input",
                "then": "check",
                "catch": "failed",
            },
            "check": {"choose": [{"guard": "data.total > `100`", "to": "approve"}], "otherwise": "ship"},
            "approve": {"on": [{"event": "approved", "to": "ship"}], "after": {"ms": 86400000, "to": "failed"}},
            "ship": {"work": {"dag": dag()}, "then": "pack", "limit": 3},
            "pack": {
                "flow": {
                    "initial": "box",
                    "states": {
                        "box": {"work": {"task": "pack", "version": "1"}, "then": "sealed"},
                        "sealed": {"final": True},
                    },
                },
                "then": "done",
            },
            "done": {"final": True},
            "failed": {"final": True},
        },
    }


def chain(n: int, last: Callable[[dict], None] | None = None) -> dict[str, Any]:
    """``n`` states s0 → s1 → … (work, choose and on in turn), then ``end``."""
    states: dict[str, Any] = {}
    for i in range(n):
        following = f"s{i + 1}" if i + 1 < n else "end"
        kind = i % 3
        if kind == 0:
            states[f"s{i}"] = {"work": {"task": "pack", "version": "1"}, "then": following, "catch": "end"}
        elif kind == 1:
            states[f"s{i}"] = {"choose": [{"guard": "data.ok", "to": following}], "otherwise": "end"}
        else:
            states[f"s{i}"] = {"on": [{"event": "go", "to": following}], "after": {"ms": 1000, "to": "end"}}
    states["end"] = {"final": True}
    document = {"$workflow": "0.2", "initial": "s0", "states": states}
    if last is not None:
        last(states)
    return document


def _edit(change: Callable[[dict], Any]) -> Callable[[], Any]:
    def build() -> Any:
        document = valid()
        result = change(document)
        return document if result is None else result

    return build


def _set(path: str, value: Any) -> Callable[[dict], None]:
    """Set (or with value ``DELETE``, remove) the member at ``path`` ("states/fetch/then")."""

    def change(document: dict) -> None:
        *parents, last = path.split("/")
        target: Any = document
        for part in parents:
            target = target[int(part)] if isinstance(target, list) else target[part]
        if value is DELETE:
            del target[last]
        elif isinstance(target, list):
            target[int(last)] = value
        else:
            target[last] = copy.deepcopy(value)

    return change


DELETE = object()
DAG = "states/ship/work/dag"
P_DAG = "/states/ship/work/dag"


def _nested(depth: int) -> dict[str, Any]:
    body: dict[str, Any] = {"initial": "leaf", "states": {"leaf": {"final": True}}}
    for _ in range(depth):
        body = {"initial": "f", "states": {"f": {"flow": body, "then": "out"}, "out": {"final": True}}}
    return {"$workflow": "0.2", **body}


def _loop_back(states: dict) -> None:
    """``end`` goes back to ``s0``: every state is then on an automatic cycle, none limited."""
    states["end"] = {"choose": [{"guard": "data.again", "to": "s0"}], "otherwise": "stop"}
    states["stop"] = {"final": True}


# (id, build, code, pointer)
INVALID: list[tuple[str, Callable[[], Any], str, str]] = [
    ("not-an-object", lambda: ["$workflow", "0.2"], "DOCUMENT_FORMAT", ""),
    ("no-format", _edit(_set("$workflow", DELETE)), "DOCUMENT_FORMAT", "/$workflow"),
    ("old-format", _edit(_set("$workflow", "0.1")), "DOCUMENT_FORMAT", "/$workflow"),
    ("unknown-top-member", _edit(_set("stats", {})), "UNKNOWN_MEMBER", "/stats"),
    ("blank-revision", _edit(_set("revision", "  ")), "INVALID_MEMBER", "/revision"),
    ("no-states", _edit(_set("states", DELETE)), "MISSING_MEMBER", "/states"),
    ("empty-states", _edit(_set("states", {})), "INVALID_MEMBER", "/states"),
    ("no-initial", _edit(_set("initial", DELETE)), "MISSING_MEMBER", "/initial"),
    ("undeclared-initial", _edit(_set("initial", "start")), "UNDECLARED_STATE", "/initial"),
    ("state-not-object", _edit(_set("states/done", True)), "STATE_FORM", "/states/done"),
    ("state-without-form", _edit(_set("states/done", {"limit": 2})), "STATE_FORM", "/states/done"),
    ("state-with-two-forms", _edit(_set("states/done/choose", [])), "STATE_FORM", "/states/done"),
    ("misspelt-member", _edit(_set("states/fetch/thne", "check")), "UNKNOWN_MEMBER", "/states/fetch/thne"),
    ("member-of-another-form", _edit(_set("states/fetch/after", {"ms": 1, "to": "done"})), "UNKNOWN_MEMBER",
     "/states/fetch/after"),  # fmt: skip
    ("work-without-then", _edit(_set("states/fetch/then", DELETE)), "MISSING_MEMBER", "/states/fetch/then"),
    ("undeclared-then", _edit(_set("states/fetch/then", "chek")), "UNDECLARED_STATE", "/states/fetch/then"),
    ("then-not-a-name", _edit(_set("states/fetch/then", ["check"])), "INVALID_MEMBER", "/states/fetch/then"),
    ("undeclared-catch", _edit(_set("states/fetch/catch", "oops")), "UNDECLARED_STATE", "/states/fetch/catch"),
    ("work-with-task-and-dag", _edit(_set("states/fetch/work/dag", {})), "INVALID_MEMBER", "/states/fetch/work"),
    ("task-without-version", _edit(_set("states/fetch/work/version", DELETE)), "MISSING_MEMBER",
     "/states/fetch/work/version"),  # fmt: skip
    ("unregistered-task", _edit(_set("states/fetch/work/task", "fetch-orders")), "UNKNOWN_TASK",
     "/states/fetch/work/task"),  # fmt: skip
    ("unregistered-version", _edit(_set("states/fetch/work/version", "3")), "UNKNOWN_TASK",
     "/states/fetch/work/task"),  # fmt: skip
    ("unknown-task-member", _edit(_set("states/fetch/work/args", [1])), "UNKNOWN_MEMBER", "/states/fetch/work/args"),
    ("input-not-jmespath", _edit(_set("states/fetch/input", "input.[")), "INVALID_EXPRESSION",
     "/states/fetch/input"),  # fmt: skip
    ("input-not-a-string", _edit(_set("states/fetch/input", 7)), "INVALID_EXPRESSION", "/states/fetch/input"),
    ("with-not-jmespath", _edit(_set("states/fetch/work/with", "{a: }")), "INVALID_EXPRESSION",
     "/states/fetch/work/with"),  # fmt: skip
    ("empty-choose", _edit(_set("states/check/choose", [])), "INVALID_MEMBER", "/states/check/choose"),
    ("choice-without-guard", _edit(_set("states/check/choose/0/guard", DELETE)), "MISSING_MEMBER",
     "/states/check/choose/0/guard"),  # fmt: skip
    ("choice-with-unknown-member", _edit(_set("states/check/choose/0/when", "x")), "UNKNOWN_MEMBER",
     "/states/check/choose/0/when"),  # fmt: skip
    ("guard-not-jmespath", _edit(_set("states/check/choose/0/guard", "data.total >")), "INVALID_EXPRESSION",
     "/states/check/choose/0/guard"),  # fmt: skip
    ("choice-to-undeclared", _edit(_set("states/check/choose/0/to", "aprove")), "UNDECLARED_STATE",
     "/states/check/choose/0/to"),  # fmt: skip
    ("choice-not-an-object", _edit(_set("states/check/choose/0", "approve")), "INVALID_MEMBER",
     "/states/check/choose/0"),  # fmt: skip
    ("missing-otherwise", _edit(_set("states/check/otherwise", DELETE)), "MISSING_OTHERWISE",
     "/states/check/otherwise"),  # fmt: skip
    ("on-without-events-or-delay", _edit(lambda d: d["states"].update(approve={"on": []})), "EMPTY_WAIT",
     "/states/approve/on"),  # fmt: skip
    ("event-branch-without-event", _edit(_set("states/approve/on/0/event", DELETE)), "MISSING_MEMBER",
     "/states/approve/on/0/event"),  # fmt: skip
    ("event-type-blank", _edit(_set("states/approve/on/0/event", " ")), "INVALID_MEMBER",
     "/states/approve/on/0/event"),  # fmt: skip
    ("event-guard-not-jmespath", _edit(_set("states/approve/on/0/guard", "event.payload.[")), "INVALID_EXPRESSION",
     "/states/approve/on/0/guard"),  # fmt: skip
    ("event-to-undeclared", _edit(_set("states/approve/on/0/to", "shipped")), "UNDECLARED_STATE",
     "/states/approve/on/0/to"),  # fmt: skip
    ("negative-delay", _edit(_set("states/approve/after/ms", -1)), "INVALID_DELAY", "/states/approve/after/ms"),
    ("delay-not-a-number", _edit(_set("states/approve/after/ms", "1 day")), "INVALID_DELAY",
     "/states/approve/after/ms"),  # fmt: skip
    ("delay-without-ms", _edit(_set("states/approve/after/ms", DELETE)), "MISSING_MEMBER",
     "/states/approve/after/ms"),  # fmt: skip
    ("delay-to-undeclared", _edit(_set("states/approve/after/to", "timeout")), "UNDECLARED_STATE",
     "/states/approve/after/to"),  # fmt: skip
    ("zero-limit", _edit(_set("states/ship/limit", 0)), "INVALID_LIMIT", "/states/ship/limit"),
    ("fractional-limit", _edit(_set("states/ship/limit", 2.5)), "INVALID_LIMIT", "/states/ship/limit"),
    ("boolean-limit", _edit(_set("states/ship/limit", True)), "INVALID_LIMIT", "/states/ship/limit"),
    ("huge-limit", _edit(_set("states/ship/limit", 10**12)), "INVALID_LIMIT", "/states/ship/limit"),
    ("final-false", _edit(_set("states/done/final", False)), "INVALID_MEMBER", "/states/done/final"),
    ("final-with-then", _edit(_set("states/done/then", "fetch")), "UNKNOWN_MEMBER", "/states/done/then"),
    ("nested-target-outside-its-scope", _edit(_set("states/pack/flow/states/box/then", "done")), "UNDECLARED_STATE",
     "/states/pack/flow/states/box/then"),  # fmt: skip
    ("flow-without-then", _edit(_set("states/pack/then", DELETE)), "MISSING_MEMBER", "/states/pack/then"),
    ("flow-unknown-member", _edit(_set("states/pack/flow/then", "done")), "UNKNOWN_MEMBER", "/states/pack/flow/then"),
    ("flow-without-states", _edit(_set("states/pack/flow/states", DELETE)), "MISSING_MEMBER",
     "/states/pack/flow/states"),  # fmt: skip
    ("nested-65-deep", lambda: _nested(65), "NESTING_TOO_DEEP", "/states/f" + "/flow/states/f" * 64 + "/flow"),
    ("empty-state-name", _edit(_set("states/", {"final": True})), "INVALID_STATE_NAME", "/states/"),
    ("nul-in-a-state-name", _edit(_set("states/do\x00ne", {"final": True})), "DOCUMENT_NOT_JSON",
     "/states/do\x00ne"),  # fmt: skip
    ("automatic-loop-without-limit",
     _edit(lambda d: d["states"]["check"].update(otherwise="fetch")), "UNBOUNDED_CYCLE", "/states/fetch"),  # fmt: skip
    ("loop-through-a-delay",
     _edit(lambda d: d["states"]["approve"].update(after={"ms": 1, "to": "check"})), "UNBOUNDED_CYCLE",
     "/states/check"),  # fmt: skip
    ("loop-through-a-flow-exit",
     _edit(lambda d: d["states"]["pack"].update(then="pack")), "UNBOUNDED_CYCLE", "/states/pack"),  # fmt: skip
    ("loop-inside-a-flow",
     _edit(lambda d: d["states"]["pack"]["flow"]["states"]["box"].update(catch="box")), "UNBOUNDED_CYCLE",
     "/states/pack/flow/states/box"),  # fmt: skip
    ("dag-without-format", _edit(_set(f"{DAG}/$dag", DELETE)), "DOCUMENT_FORMAT", f"{P_DAG}/$dag"),
    ("dag-unknown-member", _edit(_set(f"{DAG}/edge", [])), "UNKNOWN_MEMBER", f"{P_DAG}/edge"),
    ("dag-cycle", _edit(lambda d: d["states"]["ship"]["work"]["dag"]["edges"].append({"from": "price", "to": "stock"})
                        or d["states"]["ship"]["work"]["dag"]["edges"].append({"from": "stock", "to": "price"})),
     "DAG_CYCLE", f"{P_DAG}/nodes/price"),  # fmt: skip
    ("dag-self-edge", _edit(lambda d: d["states"]["ship"]["work"]["dag"]["edges"].append(
        {"from": "price", "to": "price"})), "DAG_CYCLE", f"{P_DAG}/edges/4"),  # fmt: skip
    ("dag-edge-to-unknown-node", _edit(_set(f"{DAG}/edges/1/to", "stocks")), "DAG_UNKNOWN_NODE",
     f"{P_DAG}/edges/1/to"),  # fmt: skip
    ("dag-edge-from-unknown-node", _edit(_set(f"{DAG}/edges/2/from", 3)), "DAG_UNKNOWN_NODE",
     f"{P_DAG}/edges/2/from"),  # fmt: skip
    ("dag-two-inputs", _edit(_set(f"{DAG}/nodes/in2", {"kind": "input"})), "DAG_ENDPOINTS", f"{P_DAG}/nodes/in2"),
    ("dag-no-output", _edit(_set(f"{DAG}/nodes/out/kind", "task")), "MISSING_MEMBER", f"{P_DAG}/nodes/out/task"),
    ("dag-unreachable-node", _edit(_set(f"{DAG}/nodes/audit", {"kind": "task", "task": "pack", "version": "1"})),
     "DAG_UNREACHABLE", f"{P_DAG}/nodes/audit"),  # fmt: skip
    ("dag-unregistered-task", _edit(_set(f"{DAG}/nodes/stock/version", "9")), "UNKNOWN_TASK",
     f"{P_DAG}/nodes/stock/task"),  # fmt: skip
    ("dag-unknown-kind", _edit(_set(f"{DAG}/nodes/stock/kind", "job")), "INVALID_MEMBER", f"{P_DAG}/nodes/stock/kind"),
    ("dag-edge-into-input", _edit(lambda d: d["states"]["ship"]["work"]["dag"]["edges"].append(
        {"from": "price", "to": "in"})), "DAG_EDGE", f"{P_DAG}/edges/4"),  # fmt: skip
    ("dag-repeated-edge", _edit(lambda d: d["states"]["ship"]["work"]["dag"]["edges"].append(
        {"from": "in", "to": "price"})), "DAG_EDGE", f"{P_DAG}/edges/4"),  # fmt: skip
    ("dag-with-not-jmespath", _edit(_set(f"{DAG}/nodes/out/with", "{price: }")), "INVALID_EXPRESSION",
     f"{P_DAG}/nodes/out/with"),  # fmt: skip
    ("dag-checkpoint-not-boolean", _edit(_set(f"{DAG}/nodes/price/checkpoint", "yes")), "INVALID_MEMBER",
     f"{P_DAG}/nodes/price/checkpoint"),  # fmt: skip
    ("dag-too-many-nodes",
     _edit(_set(f"{DAG}/nodes", {f"n{i}": {"kind": "input"} for i in range(1001)})), "DOCUMENT_TOO_LARGE",
     f"{P_DAG}/nodes"),  # fmt: skip
    ("expression-too-long", _edit(_set("states/fetch/input", "input" + ".a" * 1200)), "INVALID_EXPRESSION",
     "/states/fetch/input"),  # fmt: skip
    ("expression-nested-too-deep", _edit(_set("states/fetch/input", "(" * 900 + "input" + ")" * 900)),
     "INVALID_EXPRESSION", "/states/fetch/input"),  # fmt: skip
    ("10000-states-one-unbounded-cycle", lambda: chain(10_000, _loop_back), "UNBOUNDED_CYCLE", "/states/s0"),
    ("10000-states-last-target-undeclared",
     lambda: chain(10_000, lambda states: states["s9999"].update(then="the-end")), "UNDECLARED_STATE",
     "/states/s9999/then"),  # fmt: skip
    ("50001-states", lambda: {"$workflow": "0.2", "initial": "s0",
                              "states": {f"s{i}": {"final": True} for i in range(50_001)}},
     "DOCUMENT_TOO_LARGE", "/states"),  # fmt: skip
]
