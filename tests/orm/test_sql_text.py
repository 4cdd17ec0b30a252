"""The hot path's SQL, per vendor, as readable text kept beside the code.

``durableflow/orm/statements/<vendor>.sql`` holds the statements a one-step delivery runs
(``Statements.hot_path``), formatted, and ``<vendor>-items.sql`` those of an item task
(``ItemStatements.hot_path``). This test builds them and compares: a change to the hot
path fails here until the file is written again (``DURABLEFLOW_WRITE_SQL=1`` writes it), so the
change is reviewed as SQL.
"""

from __future__ import annotations

import os

import re

import pytest

from durableflow.orm.items import ItemStatements
from durableflow.orm.sql import Statements
from tests.cluster import ROOT

FOLDER = ROOT / "durableflow" / "orm" / "statements"


def _text(vendor: str) -> str:
    statements = Statements(vendor, lambda name: f'"{name}"')  # both vendors quote so
    parts = [f"-- The statements of a one-step delivery on {vendor}, written by tests/orm/test_sql_text.py.\n"]
    for name, sql in statements.hot_path().items():
        parts.append(f"-- {name}\n{_lines(sql)};\n")
    return "\n".join(parts)


def _items_text(vendor: str) -> str:
    statements = ItemStatements(Statements(vendor, lambda name: f'"{name}"'))
    parts = [f"-- The statements of an item task on {vendor}, written by tests/orm/test_sql_text.py.\n"]
    for name, sql in statements.hot_path().items():
        parts.append(f"-- {name}\n{_lines(sql)};\n")
    return "\n".join(parts)


def _lines(sql: str) -> str:
    """One clause per line (and one assignment per line after SET): enough to read a diff."""
    sql = re.sub(r"\), (\w+ AS \()", r"),\n\1", sql)  # one part of a WITH per line
    sql = re.sub(r" (SET|WHERE|AND|OR|RETURNING|FROM|ON CONFLICT|SELECT|VALUES) ", r"\n  \1 ", sql)
    return re.sub(r', ("[a-z_]+" = )', r",\n      \1", sql)


@pytest.mark.parametrize("vendor", ["postgresql", "sqlite"])
def test_the_hot_path_sql_is_the_text_kept_beside_the_code(vendor, db):
    path = FOLDER / f"{vendor}.sql"
    text = _text(vendor)
    if os.environ.get("DURABLEFLOW_WRITE_SQL"):
        path.write_text(text)
    assert path.read_text() == text, f"the hot path's SQL changed: review it, then DURABLEFLOW_WRITE_SQL=1 writes {path}"


@pytest.mark.parametrize("vendor", ["postgresql", "sqlite"])
def test_an_item_task_s_sql_is_the_text_kept_beside_the_code(vendor, db):
    path = FOLDER / f"{vendor}-items.sql"
    text = _items_text(vendor)
    if os.environ.get("DURABLEFLOW_WRITE_SQL"):
        path.write_text(text)
    assert path.read_text() == text, f"an item task's SQL changed: review it, then DURABLEFLOW_WRITE_SQL=1 writes {path}"
