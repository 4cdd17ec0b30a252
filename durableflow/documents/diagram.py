"""The statechart of a compiled document drawn as SVG, server-side, without a graph library.

A layered layout: states are put in layers by their longest path from the initial state
(transitions that go back up, the loops, are set aside for that), ordered within each layer
by the mean position of their predecessors (two sweeps), then drawn top to bottom. Nested
states are drawn with the flow they belong to named above them and a tint per depth.
Transitions that go down are straight lines; ones that go back up bend around the right.

Every text comes from the document, so every text is escaped. Work is linear in states and
transitions; beyond ``MAX_DRAWN`` states the diagram says so instead of drawing.
"""

from __future__ import annotations

from typing import Any
from xml.sax.saxutils import escape

__all__ = ["render", "edges", "MAX_DRAWN"]

MAX_DRAWN = 400
NODE_H, LAYER_GAP, NODE_GAP, MARGIN = 44, 56, 28, 24
LEFT = 150  # room for long transitions bending round the left
CHAR_W, MIN_W, MAX_W = 7.2, 90, 240
LABEL_MAX = 28
FILL = {"work": "#e8f1fb", "choose": "#fdf3e1", "on": "#eaf7ee", "flow": "#f2ecfa", "final": "#eeeeee"}
STROKE = {"work": "#417690", "choose": "#b7791f", "on": "#2f855a", "flow": "#6b46c1", "final": "#333333"}
KIND_LABEL = {"work": "work", "choose": "choose", "on": "on", "flow": "flow", "final": "final"}


def edges(compiled: dict[str, Any]) -> list[tuple[int, int, str]]:
    """Every transition: ``(from, to, label)``, in document order."""
    found: list[tuple[int, int, str]] = []
    for i, state in enumerate(compiled["states"]):
        kind = state["kind"]
        if kind == "work":
            found.append((i, state["then"], "then"))
            if state.get("catch") is not None:
                found.append((i, state["catch"], "catch"))
        elif kind == "choose":
            found.extend((i, choice["to"], _short(choice["guard"])) for choice in state["choose"])
            found.append((i, state["otherwise"], "otherwise"))
        elif kind == "on":
            for branch in state["on"]:
                guard = f" [{_short(branch['guard'], 14)}]" if branch.get("guard") else ""
                found.append((i, branch["to"], f"{branch['event']}{guard}"))
            if state.get("after") is not None:
                found.append((i, state["after"]["to"], f"after {_duration(state['after']['ms'])}"))
        elif kind == "flow":
            found.append((i, state["initial"], "enter"))
        elif state.get("exit") is not None:
            found.append((i, state["exit"], "exit"))
    return found


def render(compiled: dict[str, Any], *, highlight: str | None = None) -> str:
    """The SVG text of the statechart; ``highlight``: a state's path to draw marked (a run's)."""
    states = compiled["states"]
    if len(states) > MAX_DRAWN:
        return _message(f"{len(states)} states: too many to draw (at most {MAX_DRAWN})")
    transitions = edges(compiled)
    layers = _layers(len(states), compiled["initial"], transitions)
    rows = _order(layers, transitions, len(states))
    boxes = _place(states, rows)
    width = max((x + w for x, _, w in boxes.values()), default=0) + MARGIN + 120
    height = max((y for _, y, _ in boxes.values()), default=0) + NODE_H + MARGIN
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" class="durableflow-statechart" width="{width:.0f}" '
        f'height="{height:.0f}" viewBox="0 0 {width:.0f} {height:.0f}" font-family="sans-serif" font-size="12">',
        '<defs><marker id="arrow" viewBox="0 0 10 10" refX="10" refY="5" markerWidth="7" markerHeight="7" '
        'orient="auto-start-reverse"><path d="M0,0 L10,5 L0,10 z" fill="#555"/></marker></defs>',
    ]
    layer_of = {i: n for n, row in enumerate(rows) for i in row}
    left = [min(boxes[i][0] for i in row) for row in rows]  # each layer's left edge
    for source, target, label in transitions:
        down, up = layer_of[source], layer_of[target]
        route: str | float
        if up <= down:
            route = "loop"
        elif up == down + 1:
            route = "down"
        else:  # past the layers between: round their left side
            route = min(left[down + 1 : up]) - 30
        parts.append(_edge(boxes[source], boxes[target], label, route))
    for i, state in enumerate(states):
        parts.append(_node(state, boxes[i], i == compiled["initial"], state["path"] == highlight))
    parts.append("</svg>")
    return "".join(parts)


# layout -------------------------------------------------------------------------------------


def _layers(count: int, initial: int, transitions: list[tuple[int, int, str]]) -> list[int]:
    """Each state's layer: its longest path from the initial state, loops set aside."""
    successors: list[list[int]] = [[] for _ in range(count)]
    for source, target, _ in transitions:
        successors[source].append(target)
    # Iterative DFS from the initial state (then from any state not reached): the edges to a
    # state still on the path are the loops.
    order: list[int] = []
    colour = bytearray(count)
    back: set[tuple[int, int]] = set()
    for root in [initial, *range(count)]:
        if colour[root]:
            continue
        colour[root] = 1
        stack = [(root, iter(successors[root]))]
        while stack:
            node, following = stack[-1]
            for nxt in following:
                if colour[nxt] == 0:
                    colour[nxt] = 1
                    stack.append((nxt, iter(successors[nxt])))
                    break
                if colour[nxt] == 1:
                    back.add((node, nxt))
            else:
                colour[node] = 2
                order.append(node)
                stack.pop()
    layer = [0] * count
    for node in reversed(order):  # a topological order of the graph without its loops
        for nxt in successors[node]:
            if (node, nxt) not in back and layer[nxt] < layer[node] + 1:
                layer[nxt] = layer[node] + 1
    return layer


def _order(layer: list[int], transitions: list[tuple[int, int, str]], count: int) -> list[list[int]]:
    """States by layer, each layer ordered by its predecessors' mean position (two sweeps)."""
    rows: list[list[int]] = [[] for _ in range(max(layer, default=0) + 1)]
    for i in range(count):
        rows[layer[i]].append(i)
    predecessors: list[list[int]] = [[] for _ in range(count)]
    for source, target, _ in transitions:
        if layer[source] < layer[target]:
            predecessors[target].append(source)
    for _ in range(2):
        position = {i: n for row in rows for n, i in enumerate(row)}
        for row in rows[1:]:
            row.sort(key=lambda i: (sum(position[p] for p in predecessors[i]) / len(predecessors[i])
                                    if predecessors[i] else position[i]))  # fmt: skip
            position.update({i: n for n, i in enumerate(row)})
    return rows


def _place(states: list[dict[str, Any]], rows: list[list[int]]) -> dict[int, tuple[float, float, float]]:
    """``{state: (x, y, width)}``, each layer centred on the widest."""
    widths = {i: _width(states[i]) for row in rows for i in row}
    spans = [sum(widths[i] for i in row) + NODE_GAP * (len(row) - 1) for row in rows]
    widest = max(spans, default=0)
    boxes: dict[int, tuple[float, float, float]] = {}
    for n, row in enumerate(rows):
        x = LEFT + (widest - spans[n]) / 2
        y = MARGIN + n * (NODE_H + LAYER_GAP)
        for i in row:
            boxes[i] = (x, y, widths[i])
            x += widths[i] + NODE_GAP
    return boxes


def _width(state: dict[str, Any]) -> float:
    return min(MAX_W, max(MIN_W, CHAR_W * min(len(state["path"]), LABEL_MAX + 4) + 24))


# drawing ------------------------------------------------------------------------------------


def _node(state: dict[str, Any], box: tuple[float, float, float], initial: bool, marked: bool) -> str:
    x, y, w = box
    kind = state["kind"]
    fill, stroke = FILL[kind], STROKE[kind]
    width = 3 if marked else (2 if initial else 1.2)
    radius = 20 if kind in ("on", "final") else 4
    shape = (f'<rect x="{x:.1f}" y="{y:.1f}" width="{w:.1f}" height="{NODE_H}" rx="{radius}" fill="{fill}" '
             f'stroke="{"#d6336c" if marked else stroke}" stroke-width="{width}"/>')  # fmt: skip
    if kind == "final":
        shape += (f'<rect x="{x + 3:.1f}" y="{y + 3:.1f}" width="{w - 6:.1f}" height="{NODE_H - 6}" rx="{radius - 3}" '
                  f'fill="none" stroke="{stroke}"/>')  # fmt: skip
    if kind == "flow":
        shape += f'<line x1="{x:.1f}" y1="{y + 14:.1f}" x2="{x + w:.1f}" y2="{y + 14:.1f}" stroke="{stroke}"/>'
    limit = f" ≤{state['limit']}" if state.get("limit") is not None else ""
    title = escape(f"{state['path']} ({kind}{', limit ' + str(state['limit']) if limit else ''})")
    name = escape(_short(state["name"], LABEL_MAX))
    within = state["path"].rsplit("/", 1)[0] if state.get("parent") is not None else ""
    tag = f"{KIND_LABEL[kind]}{limit}{' · start' if initial else ''}"
    tag = escape(f"{tag} · in {_short(within, 16)}" if within else tag)
    return (f'<g class="state state-{kind}" data-path="{escape(state["path"], {chr(34): "&quot;"})}">'
            f"<title>{title}</title>{shape}"
            f'<text x="{x + w / 2:.1f}" y="{y + 19:.1f}" text-anchor="middle" font-weight="bold">{name}</text>'
            f'<text x="{x + w / 2:.1f}" y="{y + 34:.1f}" text-anchor="middle" fill="#666" font-size="10">{tag}</text>'
            "</g>")  # fmt: skip


def _edge(source, target, label: str, route: str | float) -> str:
    """``route``: "down" (the next layer), "loop" (back up, round the right) or the x to bend
    at, left of the layers a long transition passes."""
    sx, sy, sw = source
    tx, ty, tw = target
    text = escape(label)
    if route == "down":
        x1, y1, x2, y2 = sx + sw / 2, sy + NODE_H, tx + tw / 2, ty
        path = f"M{x1:.1f},{y1:.1f} L{x2:.1f},{y2:.1f}"
        # Near the source, on the outer side: the labels of a state's transitions stay apart.
        anchor = "end" if x2 < x1 - 4 else "start"
        lx, ly = x1 + (x2 - x1) * 0.3 + (-4 if anchor == "end" else 4), y1 + (y2 - y1) * 0.3 + 4
        return _drawn(path, lx, ly, text, anchor)
    elif route != "loop":
        x1, y1, x2, y2 = sx, sy + NODE_H / 2, tx, ty + NODE_H / 2
        bend = min(float(route), x1 - 20, x2 - 20)
        path = f"M{x1:.1f},{y1:.1f} C{bend:.1f},{y1:.1f} {bend:.1f},{y2:.1f} {x2:.1f},{y2:.1f}"
        lx, ly = bend - 4, (y1 + y2) / 2
        return _drawn(path, lx, ly, text, "end")
    else:  # a loop (or a step sideways): out of the right side, round, into the target's right
        x1, y1 = sx + sw, sy + NODE_H / 2
        x2, y2 = tx + tw, ty + NODE_H / 2
        bend = max(x1, x2) + 40
        path = f"M{x1:.1f},{y1:.1f} C{bend:.1f},{y1:.1f} {bend:.1f},{y2:.1f} {x2:.1f},{y2:.1f}"
        lx, ly = bend - 8, (y1 + y2) / 2
    return _drawn(path, lx, ly, text, "start")


def _drawn(path: str, x: float, y: float, text: str, anchor: str) -> str:
    return (
        f'<g class="transition"><path d="{path}" fill="none" stroke="#555" marker-end="url(#arrow)"/>'
        f'<text x="{x:.1f}" y="{y:.1f}" fill="#333" font-size="10" text-anchor="{anchor}">{text}</text></g>'
    )


def _message(text: str) -> str:
    return (f'<svg xmlns="http://www.w3.org/2000/svg" class="durableflow-statechart" width="520" height="40">'
            f'<text x="8" y="24" font-family="sans-serif" font-size="13">{escape(text)}</text></svg>')  # fmt: skip


def _short(text: str, limit: int = 22) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _duration(ms: float) -> str:
    for unit, size in (("d", 86_400_000), ("h", 3_600_000), ("min", 60_000), ("s", 1000)):
        if ms >= size and ms % size == 0:
            return f"{int(ms // size)} {unit}"
    return f"{ms:g} ms"
