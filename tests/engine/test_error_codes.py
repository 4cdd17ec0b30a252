"""Every error code the package raises or records is in ``exceptions.CODES``, and agrees with
the exception module's docstring and the specification."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from durableflow import exceptions

PACKAGE = Path(exceptions.__file__).resolve().parent
SPEC = PACKAGE.parent.parent / "shared" / "SPEC.md"
ERROR_CLASSES = set(exceptions.__all__)
CODE = re.compile(r"^[A-Z][A-Z0-9]*(?:_[A-Z0-9]+)+$|^[A-Z]{4,}$")


def _codes_in_source() -> dict[str, list[str]]:
    """Codes the source uses, with where: first arguments of error classes, ``code=``
    arguments and ``"code": ...`` entries of error dicts, and ``default_code``."""
    found: dict[str, list[str]] = {}

    def add(node: ast.AST, path: Path) -> None:
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            found.setdefault(node.value, []).append(f"{path.relative_to(PACKAGE.parent)}:{node.lineno}")

    for path in sorted(PACKAGE.rglob("*.py")):
        if "migrations" in path.parts:
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Call):
                name = getattr(node.func, "attr", None) or getattr(node.func, "id", None)
                if name in ERROR_CLASSES and node.args:
                    add(node.args[0], path)
                for keyword in node.keywords:
                    if keyword.arg == "code":
                        add(keyword.value, path)
            elif isinstance(node, ast.Dict):
                for key, value in zip(node.keys, node.values, strict=True):
                    if isinstance(key, ast.Constant) and key.value == "code":
                        add(value, path)
            elif isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "default_code" for t in node.targets):
                add(node.value, path)
    return found


def test_the_scan_finds_the_codes_it_should():
    used = _codes_in_source()
    # Raised positionally, by keyword, recorded in a dict, and as a class default.
    assert {"INVALID_STEP_KEY", "INVALID_RESULT", "CANCELLED", "WAIT_TIMEOUT"} <= set(used)


def test_every_code_raised_or_recorded_is_listed():
    unlisted = {code: where for code, where in _codes_in_source().items() if code not in exceptions.CODES}
    assert not unlisted, f"codes used but missing from exceptions.CODES: {unlisted}"


def test_every_listed_code_is_in_the_docstring_tree():
    doc = exceptions.__doc__
    missing = [code for code in exceptions.CODES if not re.search(rf"\b{code}\b", doc)]
    assert not missing, f"codes missing from the exceptions docstring: {missing}"
    in_doc = set(re.findall(r"\b[A-Z][A-Z0-9]*_[A-Z0-9_]+\b", doc))
    assert in_doc <= set(exceptions.CODES) | {"CODES"}, in_doc - set(exceptions.CODES)


@pytest.mark.skipif(not SPEC.exists(), reason="the specification is not beside this checkout")
def test_a_listed_code_nothing_uses_yet_is_one_the_specification_promises():
    unused = set(exceptions.CODES) - set(_codes_in_source())
    assert not {code for code in unused if code not in SPEC.read_text()}


def test_every_code_is_a_constant_name():
    assert all(CODE.match(code) for code in exceptions.CODES)


@pytest.mark.skipif(not SPEC.exists(), reason="the specification is not beside this checkout")
def test_the_codes_the_specification_names_are_listed():
    from durableflow.conf import DEFAULTS

    text = SPEC.read_text()
    raised = set(re.findall(r'Error\("([A-Z][A-Z_]+)"\)', text))
    quoted = {code for code in re.findall(r"`([A-Z][A-Z0-9]*_[A-Z0-9_]+)`", text) if code not in DEFAULTS}
    settings = {code for code in quoted if code.startswith(("CELERY_", "DATABASE_", "INSTALLED_", "API_"))}
    assert {"DUPLICATE_STEP_KEY", "IDEMPOTENCY_CONFLICT"} <= raised
    codes = raised | quoted - settings
    assert codes <= set(exceptions.CODES), sorted(codes - set(exceptions.CODES))
