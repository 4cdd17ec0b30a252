"""``$dag: "0.1"`` work: task nodes between one input node and one output node.

```json
{"$dag": "0.1",
 "nodes": {"in": {"kind": "input"},
           "price": {"kind": "task", "task": "price", "version": "1", "checkpoint": true},
           "stock": {"kind": "task", "task": "stock", "version": "1"},
           "out": {"kind": "output", "with": "{price: nodes.price, stock: nodes.stock}"}},
 "edges": [{"from": "in", "to": "price"}, {"from": "in", "to": "stock"},
           {"from": "price", "to": "out"}, {"from": "stock", "to": "out"}]}
```

A node's input is its ``with`` (JMESPath over ``{input, nodes}``: the work's input and the
values of the node's predecessors by name) or, without one, its one predecessor's value (the
input node's value is the work's input), or an object of its predecessors' values by name.
The output node's value is the work's result.

Compiled, a DAG is its nodes with their predecessors and its **waves**: the task nodes by
depth (the longest path from the input). A wave's nodes do not depend on each other, so the
interpreter runs each wave's nodes concurrently, and every node's value is journaled as its
own record (``checkpoint`` nodes are guaranteed never to run again once recorded; see the
interpreter). Checks are linear in nodes plus edges, iterative (no recursion on hostile depth).
"""

from __future__ import annotations

from collections import deque
from typing import Any, Callable

from durableflow.documents.expressions import compile_expression
from durableflow.documents.pointers import escape
from durableflow.documents.shape import MAX_NAME, check_name, only, storable
from durableflow.exceptions import DocumentError

__all__ = ["compile_dag", "MAX_NODES", "MAX_EDGES"]

MAX_NODES = 1_000
MAX_EDGES = 10_000

DAG_MEMBERS = frozenset({"$dag", "nodes", "edges"})
NODE_MEMBERS = {
    "input": frozenset({"kind"}),
    "task": frozenset({"kind", "task", "version", "with", "checkpoint"}),
    "output": frozenset({"kind", "with", "checkpoint"}),
}
EDGE_MEMBERS = frozenset({"from", "to"})

TaskRef = Callable[[str, str, str], None]  # (name, version, pointer of the node): raises if unknown


def compile_dag(doc: Any, pointer: str, task_ref: TaskRef) -> dict[str, Any]:
    """The compiled form of one DAG, or ``DocumentError`` naming its first problem."""
    if not isinstance(doc, dict) or doc.get("$dag") != "0.1":
        raise DocumentError(
            "DOCUMENT_FORMAT", 'a DAG is an object with "$dag": "0.1"',
            pointer=f"{pointer}/$dag" if isinstance(doc, dict) else pointer,
        )
    only(doc, DAG_MEMBERS, pointer)
    nodes_doc = doc.get("nodes")
    if not isinstance(nodes_doc, dict) or not nodes_doc:
        raise DocumentError(
            "INVALID_MEMBER",
            "nodes is a non-empty object of nodes by name",
            pointer=f"{pointer}/nodes",
        )
    if len(nodes_doc) > MAX_NODES:
        raise DocumentError("DOCUMENT_TOO_LARGE", f"a DAG has at most {MAX_NODES} nodes", pointer=f"{pointer}/nodes")
    nodes: dict[str, dict[str, Any]] = {}
    ends: dict[str, list[str]] = {"input": [], "output": []}
    for name, spec in nodes_doc.items():
        at = f"{pointer}/nodes/{check_name(name, pointer + '/nodes')}"
        nodes[name] = _node(name, spec, at, task_ref)
        if nodes[name]["kind"] in ends:
            ends[nodes[name]["kind"]].append(name)
    for kind, names in ends.items():
        if len(names) != 1:
            at = f"{pointer}/nodes/{escape(names[1])}" if names else f"{pointer}/nodes"
            raise DocumentError("DAG_ENDPOINTS", f"a DAG has exactly one {kind} node (found {len(names)})", pointer=at)
    source, sink = ends["input"][0], ends["output"][0]
    successors = _edges(doc.get("edges"), pointer, nodes, source, sink)
    order = _topological(nodes, successors, pointer)
    _reachable(nodes, successors, order, source, sink, pointer)
    depth = {source: 0}
    for name in order:
        for following in successors[name]:
            depth[following] = max(depth.get(following, 0), depth[name] + 1)
    waves: list[list[str]] = []
    for name in order:
        if nodes[name]["kind"] == "task":
            level = depth[name] - 1
            while len(waves) <= level:
                waves.append([])
            waves[level].append(name)
    return {
        "pointer": pointer,
        "input": source,
        "output": sink,
        "nodes": nodes,
        "waves": [wave for wave in waves if wave],
    }


def _node(name: str, spec: Any, at: str, task_ref: TaskRef) -> dict[str, Any]:
    if not isinstance(spec, dict):
        raise DocumentError("INVALID_MEMBER", 'a node is {"kind": "input" | "task" | "output", ...}', pointer=at)
    kind = spec.get("kind")
    if type(kind) is not str or kind not in NODE_MEMBERS:
        raise DocumentError(
            "INVALID_MEMBER",
            f'kind is "input", "task" or "output", not {kind!r}',
            pointer=f"{at}/kind",
        )
    only(spec, NODE_MEMBERS[kind], at)
    node: dict[str, Any] = {"kind": kind, "after": []}
    checkpoint = spec.get("checkpoint", kind == "output")  # the output is always kept
    if not isinstance(checkpoint, bool):
        raise DocumentError("INVALID_MEMBER", "checkpoint is true or false", pointer=f"{at}/checkpoint")
    if kind == "output":
        checkpoint = True
    if kind == "task":
        for member in ("task", "version"):
            value = spec.get(member)
            if value is None:
                raise DocumentError("MISSING_MEMBER", f"a task node needs {member}", pointer=f"{at}/{member}")
            if not isinstance(value, str) or not value.strip() or len(value) > MAX_NAME:
                raise DocumentError(
                    "INVALID_MEMBER", f"{member} is a non-blank string of at most {MAX_NAME} characters",
                    pointer=f"{at}/{member}",
                )
            storable(value, f"{at}/{member}")
        task_ref(spec["task"], spec["version"], at)
        node.update(task=spec["task"], version=spec["version"])
    if kind != "input":
        node["checkpoint"] = checkpoint
        node["with"] = None if spec.get("with") is None else compile_expression(spec["with"], f"{at}/with")
    return node


def _edges(edges: Any, pointer: str, nodes: dict, source: str, sink: str) -> dict[str, list[str]]:
    if not isinstance(edges, list):
        raise DocumentError(
            "MISSING_MEMBER" if edges is None else "INVALID_MEMBER", "edges is a list of {from, to}",
            pointer=f"{pointer}/edges",
        )
    if len(edges) > MAX_EDGES:
        raise DocumentError("DOCUMENT_TOO_LARGE", f"a DAG has at most {MAX_EDGES} edges", pointer=f"{pointer}/edges")
    successors: dict[str, list[str]] = {name: [] for name in nodes}
    seen: set[tuple[str, str]] = set()
    for n, edge in enumerate(edges):
        at = f"{pointer}/edges/{n}"
        if not isinstance(edge, dict):
            raise DocumentError("INVALID_MEMBER", "an edge is {from, to}", pointer=at)
        only(edge, EDGE_MEMBERS, at)
        ends = []
        for member in ("from", "to"):
            name = edge.get(member)
            if name is None:
                raise DocumentError("MISSING_MEMBER", f"an edge needs {member}", pointer=f"{at}/{member}")
            if not isinstance(name, str) or name not in nodes:
                raise DocumentError("DAG_UNKNOWN_NODE", f"no node {name!r} in this DAG", pointer=f"{at}/{member}")
            ends.append(name)
        start, end = ends
        if start == end:
            raise DocumentError("DAG_CYCLE", f"an edge from {start!r} to itself", pointer=at)
        if end == source or start == sink:
            raise DocumentError(
                "DAG_EDGE",
                "nothing enters the input node and nothing leaves the output node",
                pointer=at,
            )
        if (start, end) in seen:
            raise DocumentError("DAG_EDGE", f"a second edge from {start!r} to {end!r}", pointer=at)
        seen.add((start, end))
        successors[start].append(end)
        nodes[end]["after"].append(start)
    return successors


def _topological(nodes: dict, successors: dict[str, list[str]], pointer: str) -> list[str]:
    """Kahn's order (ties in document order); ``DAG_CYCLE`` at a node on a cycle."""
    incoming = {name: len(node["after"]) for name, node in nodes.items()}
    ready = deque(name for name in nodes if incoming[name] == 0)
    order: list[str] = []
    while ready:
        name = ready.popleft()
        order.append(name)
        for following in successors[name]:
            incoming[following] -= 1
            if incoming[following] == 0:
                ready.append(following)
    if len(order) < len(nodes):
        stuck = next(name for name in nodes if incoming[name] > 0)
        raise DocumentError(
            "DAG_CYCLE", f"node {stuck!r} is on a cycle of edges (a DAG has none)",
            pointer=f"{pointer}/nodes/{escape(stuck)}",
        )
    return order


def _reachable(nodes, successors, order, source, sink, pointer) -> None:
    """Every node lies on a path from the input to the output."""
    forward = {source}
    for name in order:
        if name in forward:
            forward.update(successors[name])
    backward = {sink}
    for name in reversed(order):
        if any(following in backward for following in successors[name]):
            backward.add(name)
    for name in nodes:
        if name not in forward or name not in backward:
            where = "reached from the input node" if name not in forward else "leading to the output node"
            raise DocumentError(
                "DAG_UNREACHABLE", f"node {name!r} is not {where}: connect it or remove it",
                pointer=f"{pointer}/nodes/{escape(name)}",
            )

