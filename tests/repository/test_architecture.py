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


def test_every_storage_method_carries_its_contract_in_its_docstring():
    members = inspect.getmembers(storage_module.Storage, lambda m: inspect.isfunction(m) or isinstance(m, property))
    undocumented = [name for name, member in members if not name.startswith("__") and not inspect.getdoc(member)]
    assert not undocumented


def test_the_models_have_what_their_row_protocols_name():
    # The memory storage's dataclasses are held to durableflow.engine.rows by mypy; the models
    # are opaque to it (no Django stubs), so here: every attribute exists, and a nullable
    # column is optional in its protocol.
    from durableflow import models
    from durableflow.engine import rows

    pairs = [
        (rows.ExecutionRow, models.Execution),
        (rows.WaiterRow, models.Waiter),
        (rows.EventRow, models.Event),
        (rows.EffectRow, models.Effect),
        (rows.StoreRow, models.Store),
        (rows.AppliedRow, models.StoreLedger),
        (rows.StoreWaiterRow, models.StoreWaiter),
    ]
    for protocol, model in pairs:
        fields = {name: field for field in model._meta.concrete_fields for name in (field.name, field.attname)}
        declared = protocol.__annotations__
        assert set(declared) - set(fields) == set(), protocol.__name__
        nullable = {name for name, field in fields.items() if field.null and name in declared}
        assert {name for name in nullable if "None" not in declared[name] and declared[name] != "Any"} == set()


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
            if p not in engine_modules
            and Path(p).name not in faces
            and "api" not in p
            and (verb, p) not in step_methods
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


def test_no_module_but_the_transition_table_lists_step_statuses():
    """A collection naming two ``StepStatus`` members: the sets live beside the statuses."""
    found = []
    for path, tree in _sources():
        if path == STATES:
            continue
        for node in ast.walk(tree):
            if isinstance(node, (ast.List, ast.Tuple, ast.Set)):
                members = [
                    e for e in node.elts if isinstance(e, ast.Attribute) and getattr(e.value, "id", "") == "StepStatus"
                ]
                if len(members) >= 2:
                    found.append(f"{path.relative_to(PACKAGE)}:{node.lineno}")
    assert not found, f"step-status sets outside engine/states.py: {found}"


def _imports(path: Path, tree: ast.AST) -> set[str]:
    """The durableflow modules ``path`` imports (``from durableflow import x`` names ``durableflow.x``)."""
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module == "durableflow":
                found |= {f"durableflow.{alias.name}" for alias in node.names}
            else:
                found.add(node.module)
    return {name for name in found if name.split(".")[0] == "durableflow"}


# What the engine may import from outside itself: plain-Python modules of the package root.
ENGINE_MAY_IMPORT = {"durableflow.exceptions", "durableflow.values", "durableflow.options", "durableflow.registry",
                     "durableflow.__version__"}  # fmt: skip


def test_the_engine_imports_nothing_from_the_django_side():
    """Not ``dispatch``, ``tasks``, the models, the ORM adapter or any Django-facing module."""
    found = []
    for path, tree in _sources():
        if "engine" not in path.relative_to(PACKAGE).parts[:1]:
            continue
        outside = {m for m in _imports(path, tree) if not m.startswith("durableflow.engine")} - ENGINE_MAY_IMPORT
        found += [f"{path.relative_to(PACKAGE)}: {module}" for module in sorted(outside)]
    assert not found, found


def test_dispatch_imports_only_the_engine_s_names_logs_and_transaction_guard():
    path = PACKAGE / "dispatch.py"
    engine = {m for m in _imports(path, ast.parse(path.read_text())) if m.startswith("durableflow.engine")}
    assert engine <= {"durableflow.engine", "durableflow.engine.names"}, engine
    text = path.read_text()
    assert "from durableflow.engine import logs, transactions" in text


def test_the_django_adapter_s_sql_leases_and_waiting_live_in_orm():
    for name in ("sql", "leases", "waiting"):
        assert not (PACKAGE / f"{name}.py").exists()
        assert (PACKAGE / "orm" / f"{name}.py").exists()


# Undocumented Django and psycopg names: used in orm/backend.py only (tests/orm/test_backend_internals.py).
INTERNAL_ATTRIBUTES = {"in_atomic_block", "execute_wrappers", "queries_logged", "queries_log", "make_cursor",
                       "make_debug_cursor", "get_db_converters", "pgconn", "prepare_threshold",
                       "wrap_database_errors", "transaction_status", "enter_pipeline_mode", "pipeline_sync",
                       "exit_pipeline_mode"}  # fmt: skip
INTERNAL_MODULES = {"django.db.backends.utils", "psycopg.pq", "psycopg.adapt"}


def test_undocumented_django_and_psycopg_names_are_used_in_the_backend_module_only():
    backend = PACKAGE / "orm" / "backend.py"
    found = []
    for path, tree in _sources():
        if path == backend:
            continue
        for node in ast.walk(tree):
            where = f"{path.relative_to(PACKAGE)}:{getattr(node, 'lineno', '?')}"
            if isinstance(node, ast.Attribute) and node.attr in INTERNAL_ATTRIBUTES:
                found.append(f"{where} .{node.attr}")
            elif (
                isinstance(node, ast.Attribute)
                and node.attr == "connection"
                and (getattr(node.value, "id", "") or getattr(node.value, "attr", "")) == "connection"
            ):
                found.append(f"{where} connection.connection")
            elif isinstance(node, ast.ImportFrom) and node.module in INTERNAL_MODULES:
                found.append(f"{where} from {node.module}")
            elif isinstance(node, ast.ImportFrom) and node.module == "psycopg":
                found += [f"{where} psycopg.{a.name}" for a in node.names if a.name in {"pq", "adapt"}]
    assert not found, found


def test_no_module_but_the_context_reaches_into_ctx():
    """Step kinds work with the delivery (``engine/delivery.py``), not with ``ctx``'s privates."""
    context = PACKAGE / "engine" / "context.py"
    found = [
        f"{path.relative_to(PACKAGE)}:{node.lineno} .{node.attr}"
        for path, tree in _sources()
        if path != context
        for node in ast.walk(tree)
        if isinstance(node, ast.Attribute)
        and node.attr.startswith("_")
        and (getattr(node.value, "id", "") == "ctx" or getattr(node.value, "attr", "") in {"ctx", "_ctx"})
    ]
    assert not found, found
