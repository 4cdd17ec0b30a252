"""The documentation site builds with no warning, its generated reference holds what the code
holds, and no shipped text cites the spec file.

The build runs once per session (``built_site``, in ``tests/docs_blocks.py``), in the embedded
pass: it reads the code, not a database.
"""

from __future__ import annotations

import re

import pytest
from django.conf import settings

from tests.cluster import ROOT
from tests.docs_blocks import DOCS

pytestmark = pytest.mark.skipif(
    not settings.DATABASES["default"]["ENGINE"].endswith("sqlite3"),
    reason="runs once, in the embedded pass (the site does not depend on the database)",
)


def _page(site, path: str) -> str:
    return (site / path / "index.html").read_text()


def test_the_site_builds_with_no_warning(built_site):
    site, log = built_site
    assert "WARNING" not in log and "ERROR" not in log, log
    for page in ("tutorial", "how-to/stores", "reference/python-api", "reference/rest-api", "explanation/correctness"):
        assert (site / page / "index.html").exists(), page
    assert (site / "reference" / "openapi.json").exists()


def test_every_error_code_setting_and_status_is_in_the_reference(built_site):
    from durableflow.conf import DEFAULTS
    from durableflow.engine.states import TRANSITIONS
    from durableflow.exceptions import CODES

    site, _ = built_site
    errors, options, statuses = (_page(site, f"reference/{p}") for p in ("errors", "settings", "statuses"))
    assert [code for code in CODES if f"<code>{code}</code>" not in errors] == []
    assert [key for key in DEFAULTS if f"<code>{key}</code>" not in options] == []
    assert [status for status in TRANSITIONS if f"<code>{status}</code>" not in statuses] == []


def test_every_public_name_is_in_the_api_reference(built_site):
    import durableflow

    source = (DOCS / "reference" / "python-api.md").read_text()
    missing = [name for name in durableflow.__all__ if f"durableflow.{name}" not in source and name not in source]
    assert missing == [], "add them to docs/reference/python-api.md"
    site, _ = built_site
    html = _page(site, "reference/python-api")
    assert "Register <code>fn(ctx, params)</code> as a durable workflow" in html, "rendered from the docstrings"


def test_every_endpoint_of_the_schema_is_in_the_rest_reference(built_site):
    import json

    site, _ = built_site
    schema = json.loads((site / "reference" / "openapi.json").read_text())
    page = _page(site, "reference/rest-api")
    assert [path for path in schema["paths"] if f"<code>{path}</code>" not in page] == []
    assert "swagger-ui-iframe" in page


_CITES = re.compile(r"\bSPEC\b|§|shared/SPEC")


def test_no_shipped_text_cites_the_spec(built_site):
    site, _ = built_site
    shipped = [ROOT / "README.md", *DOCS.rglob("*.md"), *(ROOT / "durableflow").rglob("*")]
    shipped += list(site.rglob("*.html"))  # its search index repeats the pages' text
    offenders = []
    for path in shipped:
        if not path.is_file() or path.suffix in (".pyc", ".png"):
            continue
        for number, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
            if _CITES.search(line):
                offenders.append(f"{path}:{number}: {line.strip()}")
    assert offenders == []
