"""Compile a ``$workflow: "0.2"`` document: validate it and lower it to an inspectable form.

One pass over the states, in document order, with the first problem raised as a
``DocumentError`` carrying a stable code and the JSON pointer of the offending member; then
the proof that every cycle of automatic transitions passes a state with a ``limit``
(``cycles.py``). Work is bounded by the document's size: the pass visits each member once,
expressions are compiled once per distinct text, nesting stops at 64 levels and the number
of states and nodes is capped, so a huge or hostile document is refused in bounded time.

The compiled form is plain JSON (see ``Compiled``): states in a list, transitions as
indexes into it, each state with its name, its path (``"ship/pack"``) and its pointer.
"""

from __future__ import annotations

from typing import Any, Callable

from durableflow import values
from durableflow.documents import cycles, dag
from durableflow.documents.expressions import compile_expression
from durableflow.documents.pointers import escape, join
from durableflow.documents.shape import MAX_NAME, check_name, only, required, storable
from durableflow.engine.steps.timers import MAX_SLEEP_SECONDS
from durableflow.exceptions import DocumentError

__all__ = ["compile_document", "FORMAT", "MAX_STATES", "MAX_DEPTH", "MAX_LIMIT", "MAX_DELAY_MS"]

FORMAT = "durableflow.document/1"  # the compiled form's own version
MAX_STATES = 50_000  # in all scopes together
MAX_DEPTH = 64  # nested flows
MAX_LIMIT = 1_000_000  # visits of one state
MAX_DELAY_MS = MAX_SLEEP_SECONDS * 1000  # a century, as for ctx.step.sleep

FORMS = ("work", "choose", "on", "flow", "final")
FORM_SET = frozenset(FORMS)
TOP_MEMBERS = frozenset({"$workflow", "revision", "description", "initial", "states"})
FLOW_MEMBERS = frozenset({"initial", "states"})
MEMBERS = {
    "work": frozenset({"work", "input", "then", "catch", "limit"}),
    "choose": frozenset({"choose", "otherwise", "limit"}),
    "on": frozenset({"on", "after", "limit"}),
    "flow": frozenset({"flow", "then", "limit"}),
    "final": frozenset({"final", "limit"}),
}
TASK_MEMBERS = frozenset({"task", "version", "with"})
CHOICE_MEMBERS = frozenset({"guard", "to"})
EVENT_MEMBERS = frozenset({"event", "to", "guard"})
AFTER_MEMBERS = frozenset({"ms", "to"})

TaskCheck = Callable[[str, str], bool]


def compile_document(document: Any, *, has_task: TaskCheck | None = None) -> dict[str, Any]:
    """The compiled form of ``document``, or ``DocumentError`` naming the first problem.

    ``has_task(name, version)``: whether a task is registered (default: this process's
    ``@durableflow.task`` registry).
    """
    if has_task is None:
        from durableflow.documents.tasks import tasks

        has_task = tasks.has
    with values.cycle_collection_paused():
        return _compile(document, has_task)


def _compile(document: Any, has_task: TaskCheck) -> dict[str, Any]:
    # No separate pass over the whole value: every member is either refused as unknown or
    # checked for its type here, and every text the compiler accepts for being storable, so a
    # document that compiles is JSON data (a durable value) as well.
    if not isinstance(document, dict):
        raise DocumentError("DOCUMENT_FORMAT", 'a workflow document is an object with "$workflow": "0.2"')
    if document.get("$workflow") != "0.2":
        raise DocumentError("DOCUMENT_FORMAT", 'a workflow document needs "$workflow": "0.2"', pointer="/$workflow")
    only(document, TOP_MEMBERS, "")
    revision = document.get("revision")
    if revision is not None:
        _text(revision, "/revision", "revision (a label)")
    description = document.get("description", "")
    if not isinstance(description, str):
        raise DocumentError("INVALID_MEMBER", "description is a string", pointer="/description")
    storable(description, "/description")
    lowering = _Lowering(has_task)
    initial = lowering.scope(document, "", None, None, 0)
    cycles.check(lowering.states, lowering.automatic)
    return {
        "format": FORMAT,
        "workflow": "0.2",
        "revision": revision,
        "description": description,
        "initial": initial,
        "states": lowering.states,
        "dags": lowering.dags,
        "tasks": [list(pair) for pair in sorted(lowering.tasks)],
    }


class _Lowering:
    """The states lowered so far, their automatic successors and the tasks they use."""

    def __init__(self, has_task: TaskCheck):
        self.has_task = has_task
        self.states: list[dict[str, Any]] = []
        self.automatic: list[list[int]] = []  # per state: the states it may go to by itself
        self.dags: list[dict[str, Any]] = []
        self.tasks: set[tuple[str, str]] = set()
        self.lower = {form: getattr(self, f"_{form}") for form in FORMS}

    def scope(self, body: dict, prefix: str, parent: int | None, exit_to: int | None, depth: int) -> int:
        """Lower one scope (the document, or a flow's body); return its initial state's index."""
        states = body.get("states")
        if not isinstance(states, dict) or not states:
            why = "missing" if states is None else "not a non-empty object"
            code = "MISSING_MEMBER" if states is None else "INVALID_MEMBER"
            raise DocumentError(
                code,
                f"states is {why}: a scope declares its states by name",
                pointer=f"{prefix}/states",
            )
        if len(self.states) + len(states) > MAX_STATES:
            raise DocumentError("DOCUMENT_TOO_LARGE", f"more than {MAX_STATES} states", pointer=f"{prefix}/states")
        initial = body.get("initial")
        if initial is None:
            raise DocumentError("MISSING_MEMBER", "initial names the scope's first state", pointer=f"{prefix}/initial")
        # Indexes first, so that transitions can name states declared further down.
        first = len(self.states)
        index: dict[str, int] = {}
        parent_path = None if parent is None else self.states[parent]["path"]
        _check_names(states, f"{prefix}/states")
        append, automatic = self.states.append, self.automatic.append
        for offset, name in enumerate(states):
            index[name] = first + offset
            segment = escape(name)
            path = segment if parent_path is None else f"{parent_path}/{segment}"
            append({"name": name, "path": path, "pointer": f"{prefix}/states/{segment}", "parent": parent})
            automatic([])
        start = _target(index, initial, prefix, "initial")
        lower, lowered = self.lower, self.states
        for name, spec in states.items():
            i = index[name]
            state = lowered[i]
            # One set operation finds the form; the rest of the checks only when it is not one.
            forms = spec.keys() & FORM_SET if type(spec) is dict else frozenset()
            if len(forms) != 1:
                _no_form(spec, forms, state["pointer"])
            (kind,) = forms
            if not spec.keys() <= MEMBERS[kind]:
                only(spec, MEMBERS[kind], state["pointer"])
            state["kind"] = kind
            limit = state["limit"] = spec.get("limit")
            if limit is not None and (type(limit) is not int or not 1 <= limit <= MAX_LIMIT):
                raise DocumentError(
                    "INVALID_LIMIT", f"limit is a whole number of visits from 1 to {MAX_LIMIT}, not {limit!r}",
                    pointer=f"{state['pointer']}/limit",
                )
            lower[kind](i, state, spec, index, exit_to, depth)
        return start

    # the five forms ----------------------------------------------------------------------
    # Pointers below a state are built only for an error: most members are fine, and a
    # 10,000-state document would otherwise build some 50,000 strings it never shows.

    def _work(self, i, state, spec, index, exit_to, depth) -> None:
        pointer = state["pointer"]
        work = spec["work"]
        if type(work) is not dict or ("task" in work) == ("dag" in work):
            raise DocumentError(
                "INVALID_MEMBER", 'work is {"task", "version", "with"?} or {"dag": {...}}',
                pointer=f"{pointer}/work",
            )
        if "task" in work:
            if not work.keys() <= TASK_MEMBERS:
                only(work, TASK_MEMBERS, f"{pointer}/work")
            state["work"] = self._task(work, pointer)
        else:
            only(work, frozenset({"dag"}), f"{pointer}/work")
            compiled = dag.compile_dag(work["dag"], f"{pointer}/work/dag", self._task_ref)
            state["work"] = {"dag": len(self.dags)}
            self.dags.append(compiled)
        state["input"] = _expression(spec.get("input"), pointer, "input")
        then = state["then"] = _target(index, spec.get("then"), pointer, "then")
        catch = spec.get("catch")
        state["catch"] = None if catch is None else _target(index, catch, pointer, "catch")
        self.automatic[i] = [then] if catch is None else [then, state["catch"]]

    def _choose(self, i, state, spec, index, exit_to, depth) -> None:
        pointer = state["pointer"]
        branches = spec["choose"]
        if type(branches) is not list or not branches:
            raise DocumentError(
                "INVALID_MEMBER",
                "choose is a non-empty list of {guard, to}",
                pointer=f"{pointer}/choose",
            )
        choices = state["choose"] = []
        automatic = self.automatic[i]
        for n, branch in enumerate(branches):
            if type(branch) is not dict or not branch.keys() <= CHOICE_MEMBERS or "guard" not in branch:
                at = f"{pointer}/choose/{n}"
                if type(branch) is not dict:
                    raise DocumentError("INVALID_MEMBER", "a choice is {guard, to}", pointer=at)
                only(branch, CHOICE_MEMBERS, at)
                required(branch, "guard", at)
            guard = _expression(branch["guard"], pointer, "choose", n, "guard")
            to = _target(index, branch.get("to"), pointer, "choose", n, "to")
            choices.append({"guard": guard, "to": to})
            automatic.append(to)
        if "otherwise" not in spec:
            raise DocumentError(
                "MISSING_OTHERWISE", "a choose state needs otherwise: the state to go to when no guard holds",
                pointer=f"{pointer}/otherwise",
            )
        state["otherwise"] = _target(index, spec["otherwise"], pointer, "otherwise")
        automatic.append(state["otherwise"])

    def _on(self, i, state, spec, index, exit_to, depth) -> None:
        pointer = state["pointer"]
        branches = spec["on"]
        if type(branches) is not list:
            raise DocumentError("INVALID_MEMBER", "on is a list of {event, to, guard?}", pointer=f"{pointer}/on")
        if not branches and "after" not in spec:
            raise DocumentError(
                "EMPTY_WAIT", "an on state waits for at least one event or an after delay",
                pointer=f"{pointer}/on",
            )
        waits = state["on"] = []
        for n, branch in enumerate(branches):
            if type(branch) is not dict or not branch.keys() <= EVENT_MEMBERS or "event" not in branch:
                at = f"{pointer}/on/{n}"
                if type(branch) is not dict:
                    raise DocumentError("INVALID_MEMBER", "an event branch is {event, to, guard?}", pointer=at)
                only(branch, EVENT_MEMBERS, at)
                required(branch, "event", at)
            event = branch["event"]
            if type(event) is not str or not event.strip() or len(event) > MAX_NAME or not event.isascii():
                _text(event, f"{pointer}/on/{n}/event", "event (an event type)")
            guard = branch.get("guard")
            if guard is not None:
                guard = _expression(guard, pointer, "on", n, "guard")
            to = _target(index, branch.get("to"), pointer, "on", n, "to")
            # Not automatic: an event does not come by itself, so a loop through it needs no limit.
            waits.append({"event": event, "guard": guard, "to": to})
        after = spec.get("after")
        state["after"] = None
        if after is not None:
            if type(after) is not dict or not after.keys() <= AFTER_MEMBERS:
                if type(after) is not dict:
                    raise DocumentError("INVALID_MEMBER", "after is {ms, to}", pointer=f"{pointer}/after")
                only(after, AFTER_MEMBERS, f"{pointer}/after")
            ms: Any = after.get("ms")  # a JSON value, checked here
            if type(ms) not in (int, float) or not 0 <= ms <= MAX_DELAY_MS:
                required(after, "ms", f"{pointer}/after")
                why = "negative" if type(ms) in (int, float) and ms < 0 else "not a number of milliseconds from 0"
                raise DocumentError(
                    "INVALID_DELAY", f"after.ms is {why} (at most a century): {ms!r}",
                    pointer=f"{pointer}/after/ms",
                )
            to = _target(index, after.get("to"), pointer, "after", "to")
            state["after"] = {"ms": ms, "to": to}
            self.automatic[i].append(to)  # time passes by itself

    def _flow(self, i, state, spec, index, exit_to, depth) -> None:
        pointer = state["pointer"]
        body = spec["flow"]
        if type(body) is not dict:
            raise DocumentError("INVALID_MEMBER", "flow is {initial, states}", pointer=f"{pointer}/flow")
        only(body, FLOW_MEMBERS, f"{pointer}/flow")
        if depth + 1 > MAX_DEPTH:
            raise DocumentError(
                "NESTING_TOO_DEEP",
                f"flows nest at most {MAX_DEPTH} levels deep",
                pointer=f"{pointer}/flow",
            )
        then = state["then"] = _target(index, spec.get("then"), pointer, "then")
        state["initial"] = self.scope(body, f"{pointer}/flow", i, then, depth + 1)
        self.automatic[i].append(state["initial"])

    def _final(self, i, state, spec, index, exit_to, depth) -> None:
        if spec["final"] is not True:
            raise DocumentError("INVALID_MEMBER", "final is true", pointer=f"{state['pointer']}/final")
        state["exit"] = exit_to  # a nested flow's final state continues to the flow's then
        if exit_to is not None:
            self.automatic[i].append(exit_to)

    # tasks --------------------------------------------------------------------------------

    def _task(self, work: dict, pointer: str) -> dict[str, Any]:
        name: Any = work.get("task")  # JSON values, checked here
        version: Any = work.get("version")
        for member, value in (("task", name), ("version", version)):
            if type(value) is not str or not value.strip() or len(value) > MAX_NAME or not value.isascii():
                required(work, member, f"{pointer}/work")
                _text(value, f"{pointer}/work/{member}", member)
        if (name, version) not in self.tasks:
            self._task_ref(name, version, f"{pointer}/work")
        with_ = work.get("with")
        with_ = None if with_ is None else _expression(with_, pointer, "work", "with")
        return {"task": name, "version": version, "with": with_}

    def _task_ref(self, name: str, version: str, pointer: str) -> None:
        if not self.has_task(name, version):
            raise DocumentError(
                "UNKNOWN_TASK",
                f"no task {name!r} version {version!r} is registered: register it with "
                f"@durableflow.task({name!r}, version={version!r}) in a workflows module",
                pointer=f"{pointer}/task",
            )
        self.tasks.add((name, version))


# members ------------------------------------------------------------------------------------


def _target(index: dict[str, int], name: Any, pointer: str, *member: str | int) -> int:
    found = index.get(name) if type(name) is str else None
    if found is None:
        at = join(pointer, *member)
        if name is None:
            raise DocumentError("MISSING_MEMBER", f"{member[-1]} names the state to go to", pointer=at)
        if type(name) is not str:
            raise DocumentError("INVALID_MEMBER", f"a transition names a state (a string), not {name!r}", pointer=at)
        raise DocumentError(
            "UNDECLARED_STATE",
            f"no state {name[:MAX_NAME]!r} in this scope (transitions stay within their flow; "
            "leave a flow through a final state and its then)",
            pointer=at,
        )
    return found


_checked: set[str] = set()  # expressions known to compile (the text is the whole input)


def _expression(value: Any, pointer: str, *member: str | int) -> str | None:
    if value is None or type(value) is str and value in _checked:
        return value
    text = compile_expression(value, join(pointer, *member))
    if len(_checked) < 10_000:
        _checked.add(text)
    return text


def _no_form(spec: Any, forms: Any, pointer: str) -> None:
    if type(spec) is not dict:
        raise DocumentError(
            "STATE_FORM",
            "a state is an object with one of work, choose, on, flow, final",
            pointer=pointer,
        )
    found = " and ".join(form for form in FORMS if form in forms) or "none"
    raise DocumentError(
        "STATE_FORM", f"a state declares exactly one of work, choose, on, flow, final (found {found})",
        pointer=pointer,
    )


def _check_names(names: dict, pointer: str) -> None:
    """All of a scope's names at once: one pass in C over their text, not one call per name."""
    if all(type(name) is str and 0 < len(name) <= MAX_NAME for name in names):
        text = "".join(names)
        if "\x00" not in text and (text.isascii() or not values.text_fault(text)):
            return
    for name in names:
        check_name(name, pointer)


def _text(value: Any, pointer: str, what: str) -> str:
    if not isinstance(value, str) or not value.strip() or len(value) > MAX_NAME:
        raise DocumentError(
            "INVALID_MEMBER",
            f"{what} is a non-blank string of at most {MAX_NAME} characters",
            pointer=pointer,
        )
    return storable(value, pointer)
