"""The automatic-cycle proof: a run cannot loop forever without passing a visit limit.

A transition is **automatic** when nothing outside the run has to happen for it: a work
state's ``then`` and ``catch``, every branch of a ``choose``, an ``after`` delay (time passes
by itself), entering a flow's initial state, and a nested final state's exit to its flow's
``then``. An event branch is not: an event comes from outside. A cycle of automatic
transitions that passes no state with a ``limit`` could spin for ever, so the compiler refuses
it (``UNBOUNDED_CYCLE``, at the first state of the cycle in document order); one that passes
a limited state ends when the limit is exceeded at run time.

Equivalently: with the limited states taken out of the graph, no cycle may remain. An
iterative depth-first search finds one in time linear in states plus transitions.
"""

from __future__ import annotations

from typing import Any

from durableflow import exceptions

__all__ = ["check", "find_cycle"]

_SHOWN = 8  # states named in the message


def check(states: list[dict[str, Any]], automatic: list[list[int]]) -> None:
    """``DocumentError("UNBOUNDED_CYCLE")`` if a cycle of automatic transitions has no limit."""
    bounded = [state.get("limit") is not None for state in states]
    cycle = find_cycle(automatic, bounded)
    if cycle is None:
        return
    first = min(range(len(cycle)), key=cycle.__getitem__)
    cycle = cycle[first:] + cycle[:first]  # start at the first state in document order
    names = [states[i]["path"] for i in cycle[:_SHOWN]]
    more = f" → … ({len(cycle) - _SHOWN} more)" if len(cycle) > _SHOWN else ""
    shown = " → ".join(names) + more + f" → {names[0]}"
    raise exceptions.DocumentError(
        "UNBOUNDED_CYCLE",
        f"the automatic transitions {shown} form a cycle that passes no state with a limit: "
        "give one of its states a limit (its most visits per run)",
        pointer=states[cycle[0]]["pointer"],
    )


def find_cycle(successors: list[list[int]], bounded: list[bool]) -> list[int] | None:
    """The states of one cycle among the unbounded states (in cycle order), or None."""
    colour = bytearray(len(successors))  # 0: not seen, 1: on the current path, 2: done
    for root in range(len(successors)):
        if colour[root] or bounded[root]:
            continue
        path = [root]
        position = {root: 0}
        cursors = [0]
        colour[root] = 1
        while path:
            node = path[-1]
            following = successors[node]
            cursor = cursors[-1]
            if cursor == len(following):
                colour[node] = 2
                del position[node]
                path.pop()
                cursors.pop()
                continue
            cursors[-1] = cursor + 1
            nxt = following[cursor]
            if bounded[nxt] or colour[nxt] == 2:
                continue
            if colour[nxt] == 1:
                return path[position[nxt] :]
            colour[nxt] = 1
            position[nxt] = len(path)
            path.append(nxt)
            cursors.append(0)
    return None
