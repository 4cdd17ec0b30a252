"""The reference pages that are read off the code, so that they cannot drift from it.

Each ``page_*`` function returns the Markdown of one page; ``hooks.py`` adds them to the site
at build time (``mkdocs build`` and ``mkdocs serve`` alike) and nothing generated is committed.
What each page reads:

- errors: ``durableflow.exceptions.CODES`` (every code), its module docstring (the class tree)
  and ``durableflow.api.errors`` (the HTTP status of the codes the API answers otherwise than 400);
- statuses: ``durableflow.engine.states`` (the one table of transitions, with its comments);
- settings: ``durableflow.conf.DEFAULTS`` (every key and default, with the comment above it);
- commands: the ``durableflow`` management command's own parser, the Celery task names in
  ``durableflow.dispatch`` and the system checks in ``durableflow.checks``;
- the REST API: the OpenAPI schema the API serves at ``schema/``, generated here.
"""

from __future__ import annotations

import ast
import inspect
import json
import os
import sys
import textwrap
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent

_ready = False


def setup_django() -> None:
    """A minimal project (``docs_settings``): no database is touched."""
    global _ready
    if _ready:
        return
    for path in (str(ROOT), str(HERE)):
        if path not in sys.path:
            sys.path.insert(0, path)
    os.environ["DJANGO_SETTINGS_MODULE"] = "docs_settings"
    import django

    django.setup()
    _ready = True


# Comments in the source, read next to the values they describe ---------------------------------


def _dict_node(module: Any, name: str) -> ast.Dict:
    tree = ast.parse(inspect.getsource(module))
    for node in tree.body:
        target = getattr(node, "target", None) or (node.targets[0] if isinstance(node, ast.Assign) else None)
        if isinstance(target, ast.Name) and target.id == name and isinstance(node.value, ast.Dict):
            return node.value
    raise LookupError(f"{module.__name__} has no dict literal {name}")


def key_comments(module: Any, name: str) -> dict[str, str]:
    """The comment lines right above each key of the dict literal ``name`` in ``module``."""
    lines = inspect.getsource(module).splitlines()
    found: dict[str, str] = {}
    for key in _dict_node(module, name).keys:
        text = []
        row = key.lineno - 2
        while row >= 0 and lines[row].strip().startswith("#"):
            text.insert(0, lines[row].strip().lstrip("#").strip())
            row -= 1
        found[len(found)] = " ".join(text)
    # The literal's keys may be names (``S.PENDING``): the dict itself has them evaluated, in order.
    return dict(zip(getattr(module, name), found.values()))


def key_groups(module: Any, name: str) -> dict[str, str]:
    """The last comment line above each key: the group heading it falls under (``# starting``)."""
    lines = inspect.getsource(module).splitlines()
    group, found = "", {}
    for key in _dict_node(module, name).keys:
        above = lines[key.lineno - 2].strip()
        if above.startswith("#"):
            group = above.lstrip("#").strip()
        found[ast.literal_eval(key)] = group
    return found


def _cell(text: Any) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


# Pages -------------------------------------------------------------------------------------------

GENERATED = (
    "!!! info \"Generated\"\n    This page is generated from `{source}` when the site is built: it lists "
    "what the code holds.\n"
)


def page_errors() -> str:
    from durableflow import exceptions
    from durableflow.api import errors

    statuses = dict(errors.STATUS_BY_CODE)
    for entry in errors.HTTP_CODES:
        statuses.setdefault(entry.code, getattr(entry.exception, "status_code", 400))
    groups = key_groups(exceptions, "CODES")
    out = [
        "# Error codes\n",
        GENERATED.format(source="durableflow.exceptions.CODES"),
        "Every error durableflow raises or records carries one of these codes (`error.code` in "
        "Python, `code` in the REST API's error body and in a journal record's `error`). Each "
        "class below is exported from `durableflow` and caught like any exception:\n",
        "```python\ntry:\n    durableflow.start(\"orders.approval\", {\"order_id\": \"seven\"})\n"
        "except durableflow.WorkflowStartError as error:\n    print(error.code, error.message, error.detail)\n```\n",
        "## The classes and the codes they carry\n",
        "```text\n" + textwrap.dedent(exceptions.__doc__.split("::\n\n", 1)[1].split("\n\nRecorded on", 1)[0]).rstrip()
        + "\n```\n",
        "Recorded on an execution rather than raised: `CANCELLED` (a cancelled run's error), "
        "`COMPENSATION_FAILED`, and in a compensation report `COMPENSATION_INTERRUPTED` and "
        "`COMPENSATION_UNREACHED`.\n",
        "## Every code\n",
        "The REST API answers a refused request with status 400 unless the table says otherwise.\n",
    ]
    current = None
    for code, meaning in exceptions.CODES.items():
        if groups.get(code) != current:
            current = groups.get(code)
            heading = (current or "general").replace("(HTTP status in the docstring above)", "").strip()
            out.append(f"\n### {heading[:1].upper() + heading[1:]}\n\n| code | HTTP | meaning |\n|---|---|---|")
        out.append(f"| `{code}` | {statuses.get(code, '')} | {_cell(meaning)} |")
    return "\n".join(out) + "\n"


def page_statuses() -> str:
    from durableflow.engine import states

    comments = key_comments(states, "TRANSITIONS")
    out = [
        "# Statuses and transitions\n",
        GENERATED.format(source="durableflow.engine.states.TRANSITIONS"),
        "An execution is in exactly one of these statuses. Every change of status, in every "
        "storage, is a write conditional on the statuses this table allows to move to the new one, "
        "so a cancelled execution cannot be completed by a late delivery and a completed one cannot "
        "be retried. An action the table forbids raises `InvalidTransition` (`INVALID_TRANSITION`; "
        "409 in the REST API).\n",
        "## Executions\n",
        "| status | may become | finished | claimable |\n|---|---|---|---|",
    ]
    for status in states.ExecutionStatus.choices:
        targets = ", ".join(f"`{t}`" for t in states.ExecutionStatus.choices if t in states.TRANSITIONS[status])
        finished = "yes" if status in states.TERMINAL else ""
        if status not in states.RUNNABLE:
            claimable = ""
        elif status in states.DUE_ONLY:
            claimable = "once `wake_at` is due"
        else:
            claimable = "when its lease is free"
        out.append(f"| `{status}` | {targets or '(nothing: final)'} | {finished} | {claimable} |")
    out.append("\n### Why each move exists\n")
    for status, text in comments.items():
        if text:
            out.append(f"- **`{status}`**: {text}")
    out += [
        "\nA finished execution (`finished` above) answers `result()`; nothing runs it again, "
        "except `retry()` for a `failed` one. A `waiting` execution says what it waits for in "
        "`waiting_for` (`kind`: `event`, `signal`, `token`, `child`, `task`, `timer`, `store`, "
        "`effect`, `stalled`...) and until when in `wake_at`.\n",
        "## Step records\n",
        "A journal record (one per step key) is " + ", ".join(f"`{s}`" for s in states.StepStatus.choices) + ".\n",
        "## Waits\n",
        (states.WaiterStatus.__doc__ or "").strip() + " Its status is one of "
        + ", ".join(f"`{s}`" for s in states.WaiterStatus.choices) + ".\n",
    ]
    return "\n".join(out) + "\n"


def page_settings() -> str:
    from durableflow import conf

    comments = key_comments(conf, "DEFAULTS")
    out = [
        "# Settings\n",
        GENERATED.format(source="durableflow.conf.DEFAULTS"),
        "durableflow reads one dict from your Django settings, every key optional; an unknown key "
        "is an error (`manage.py check` reports it as `durableflow.E001`, and the first use raises "
        "`ImproperlyConfigured`). Values are read at call time, so `override_settings` works in tests.\n",
        '```python\nDURABLEFLOW = {\n    "LEASE_SECONDS": 60,\n    "SWEEP_INTERVAL": 1.0,\n}\n```\n',
        "| key | default | meaning |\n|---|---|---|",
    ]
    for key, default in conf.DEFAULTS.items():
        shown = "one attempt" if key == "DEFAULT_RETRY" and default is None else f"`{default!r}`"
        out.append(f"| `{key}` | {_cell(shown)} | {_cell(comments.get(key, ''))} |")
    out.append(
        "\nThe Celery and database settings durableflow needs (JSON messages, late acknowledgement, "
        "the beat schedule, SQLite's WAL mode) are in the [tutorial](../tutorial.md#2-settings) and "
        "[Operating](../how-to/operating.md)."
    )
    return "\n".join(out) + "\n"


class _Placeholders(dict):
    """The module's names; a name a check computes when it runs is rendered as the name itself."""

    def __missing__(self, name: str) -> str:
        return name


def _render(expression: ast.expr, module) -> str:
    names = _Placeholders(vars(module))
    return str(eval(compile(ast.Expression(expression), module.__name__, "eval"), {}, names))


def _checks() -> list[tuple[str, str, str]]:
    from durableflow import checks

    found = []
    for node in ast.walk(ast.parse(inspect.getsource(checks))):
        if isinstance(node, ast.Call) and getattr(node.func, "id", "") in ("Warning", "Error"):
            keywords = {k.arg: k.value for k in node.keywords}
            ident = ast.literal_eval(keywords["id"])
            message = node.args[0]
            # A message or hint may be an f-string over the module's names (the sweep's task name)
            # or a check's own variables (a database alias), shown as their name.
            text = _render(message, checks) if not isinstance(message, ast.Call) else "(the setting's own error)"
            hint = keywords.get("hint")
            hint_text = _render(hint, checks) if hint else ""
            found.append((ident, text, hint_text))
    return sorted(set(found))


def page_commands() -> str:
    from durableflow import dispatch
    from durableflow.management.commands.durableflow import Command

    parser = Command().create_parser("manage.py", "durableflow")
    out = [
        "# Commands, tasks and checks\n",
        GENERATED.format(source="durableflow.management, durableflow.dispatch and durableflow.checks"),
        "## `manage.py durableflow`\n",
        "```text\n" + parser.format_help().rstrip() + "\n```\n",
    ]
    for action in parser._actions:  # argparse keeps the subcommands' parsers in a choices dict
        subcommands = action.choices if isinstance(action.choices, dict) else {}
        for name, sub in subcommands.items():
            out.append(f"### `manage.py durableflow {name}`\n")
            out.append("```text\n" + sub.format_help().rstrip() + "\n```\n")
    comments = _task_comments(dispatch)
    out += [
        "## Celery tasks\n",
        "durableflow sends and runs these tasks, by name, on your project's Celery app. Route "
        "them with `CELERY_TASK_ROUTES` if you must; run a worker on every queue they go to "
        f"(`{dispatch.DELIVER}` goes to the execution's queue, `DEFAULT_QUEUE` unless a start names another).\n",
        "| task | arguments and purpose |\n|---|---|",
    ]
    for name in dispatch.TASKS:
        out.append(f"| `{name}` | {_cell(comments.get(name, ''))} |")
    out += [
        "\n## System checks\n",
        "`manage.py check` (and every `runserver`, `migrate`...) reports these:\n",
        "| id | problem | hint |\n|---|---|---|",
    ]
    for ident, text, hint in _checks():
        out.append(f"| `{ident}` | {_cell(text)} | {_cell(hint)} |")
    return "\n".join(out) + "\n"


def _task_comments(dispatch: Any) -> dict[str, str]:
    """The end-of-line comment of each task name constant (``DELIVER = "..."  # args: ...``)."""
    found = {}
    for line in inspect.getsource(dispatch).splitlines():
        name, _, rest = line.partition("=")
        if name.strip() in ("DELIVER", "SWEEP", "RUN_ITEM", "PRUNE", "TICK") and "#" in rest:
            value, _, comment = rest.partition("#")
            found[ast.literal_eval(value.strip())] = comment.strip()
    return found


def openapi_schema() -> dict[str, Any]:
    """The schema ``GET schema/`` serves, for the API mounted at ``api/durableflow/``."""
    from rest_framework.test import APIRequestFactory, force_authenticate

    from durableflow.api.schema import SchemaView

    class Reader:  # whoever may read the schema; the build has no users table
        is_authenticated = is_active = is_staff = is_superuser = True
        pk = id = 0

        def has_perm(self, *args: Any) -> bool:
            return True

    request = APIRequestFactory().get("/api/durableflow/schema/", HTTP_ACCEPT="application/json")
    force_authenticate(request, user=Reader())
    response = SchemaView.as_view()(request)
    response.render()
    assert response.status_code == 200, response.content[:500]
    return json.loads(response.content)


def page_rest(schema: dict[str, Any]) -> str:
    out = [
        "# REST API\n",
        GENERATED.format(source="the OpenAPI schema the API serves at schema/"),
        f"{schema['info'].get('description', '')}\n",
        "The paths below assume the API is mounted at `api/durableflow/` (the "
        "[tutorial](../tutorial.md#2-settings) does so). The schema itself is "
        "[openapi.json](openapi.json); a running project serves the same at `api/durableflow/schema/`. "
        "How to call it from another service: [the REST API how-to](../how-to/rest-api.md).\n",
        "| method | path | what it does | answers |\n|---|---|---|---|",
    ]
    for path, operations in schema["paths"].items():
        for method, operation in operations.items():
            if method not in ("get", "post", "put", "patch", "delete"):
                continue
            summary = operation.get("summary") or operation.get("description", "").split("\n")[0]
            codes = ", ".join(sorted(operation.get("responses", {})))
            out.append(f"| {method.upper()} | `{path}` | {_cell(summary)} | {codes} |")
    out += [
        "\n## Browse the schema\n",
        "Swagger UI, served with the site (no CDN). Its *Try it out* calls need a running "
        "project on this origin; use the demo's own Swagger UI at `/api/docs/` for that.\n",
        '<swagger-ui src="openapi.json"/>\n',
    ]
    return "\n".join(out) + "\n"


def pages() -> dict[str, str]:
    """Every generated file, by its path under ``docs/``."""
    setup_django()
    schema = openapi_schema()
    return {
        "reference/errors.md": page_errors(),
        "reference/statuses.md": page_statuses(),
        "reference/settings.md": page_settings(),
        "reference/commands.md": page_commands(),
        "reference/rest-api.md": page_rest(schema),
        "reference/openapi.json": json.dumps(schema, indent=2) + "\n",
    }
