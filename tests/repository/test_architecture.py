"""The shape of the code: verbs once over one storage protocol, one transition table, and
nothing private borrowed from Django."""

from __future__ import annotations

import ast
import inspect
import re
from pathlib import Path

from durableflow.engine import storage as storage_module
from durableflow.engine.memory import InMemoryStorage
from durableflow.engine.states import ExecutionStatus
from durableflow.engine.verbs import Engine

PACKAGE = Path(storage_module.__file__).resolve().parent.parent
STATES = PACKAGE / "engine" / "states.py"
VERBS = {"start", "start_many", "cancel", "retry", "rerun", "fork", "sweep", "send_event", "signal"}
VERBS |= {"complete_token", "wake", "deliver", "settle", "compensate", "prune", "tick"}


def _sources():
    for path in sorted(PACKAGE.rglob("*.py")):
        if "migrations" not in path.parts:
            yield path, ast.parse(path.read_text(), str(path))


def _protocol_methods() -> set[str]:
    members = inspect.getmembers(storage_module.Storage, inspect.isfunction)
    return {name for name, _ in members if not name.startswith("__")}


def test_the_storage_docstring_lists_every_protocol_method():
    listed = set(re.findall(r"``(\w+)\(", storage_module.__doc__))
    assert listed == _protocol_methods()


def test_both_storages_implement_the_whole_protocol_and_no_verb():
    from durableflow.orm import OrmStorage

    for storage in (OrmStorage, InMemoryStorage):
        missing = {name for name in _protocol_methods() if not callable(getattr(storage, name, None))}
        assert not missing, f"{storage.__name__} lacks {missing}"
        assert not VERBS & {name for name in dir(storage) if not name.startswith("_")}, storage.__name__


def test_the_verbs_are_methods_of_the_engine_alone():
    defined = {}
    for path, tree in _sources():
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef) and node.name in VERBS:
                defined.setdefault(node.name, []).append(path.relative_to(PACKAGE).as_posix())
    engine_modules = {Path(inspect.getfile(cls)).relative_to(PACKAGE).as_posix() for cls in Engine.__mro__[:-1]}
    faces = {"operations.py", "testing.py", "tasks.py", "admin.py"}  # thin entry points calling the engine
    # ctx.step.start (a step method the specification names) starts a child through the engine's verb;
    # ctx.compensate() (named too) ends the delivery, which unwinds (engine/sagas.py).
    step_methods = {("start", "engine/steps/children.py"), ("compensate", "engine/context.py")}
    for verb, places in defined.items():
        in_engine = [place for place in places if place in engine_modules]
        assert len(in_engine) <= 1, (verb, places)
        stray = [
            p
            for p in places
            if p not in engine_modules and Path(p).name not in faces and "api" not in p and (verb, p) not in step_methods
        ]
        assert not stray, f"{verb} defined outside the engine and its entry points: {stray}"


def test_no_module_but_the_transition_table_lists_execution_statuses():
    """A collection naming an ``ExecutionStatus`` member, or two execution statuses as strings."""
    statuses = set(ExecutionStatus.choices)
    names = {status.upper() for status in statuses}
    found = []
    for path, tree in _sources():
        if path == STATES:
            continue
        for node in ast.walk(tree):
            if not isinstance(node, (ast.List, ast.Tuple, ast.Set)):
                continue
            members = [
                e
                for e in node.elts
                if isinstance(e, ast.Attribute)
                and e.attr in names
                and getattr(e.value, "id", "") in {"S", "ExecutionStatus"}
            ]
            strings = {e.value for e in node.elts if isinstance(e, ast.Constant) and e.value in statuses}
            if members or len(strings) >= 2:
                found.append(f"{path.relative_to(PACKAGE)}:{node.lineno}")
    assert not found, f"status lists outside engine/states.py: {found}"


def test_no_private_attribute_of_django_is_used():
    """A leading underscore is only used on durableflow's own names (``Model._meta`` is
    Django's documented Options API; ``sys._getframe`` is Python's)."""
    ours, used = set(), []
    for path, tree in _sources():
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
                ours.add(node.name)
            elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
                ours.add(node.attr)
            elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                ours.add(node.id)
            elif isinstance(node, ast.arg):
                ours.add(node.arg)
            if isinstance(node, ast.Attribute) and re.match(r"_[a-z]", node.attr):
                used.append((node.attr, f"{path.relative_to(PACKAGE)}:{node.lineno}"))
    borrowed = [(attr, where) for attr, where in used if attr not in ours | {"_meta", "_getframe"}]
    assert not borrowed, borrowed
