"""durableflow installs like any reusable app: a wheel and an sdist with everything the app
needs (``tests/docs/test_docs_tutorial.py`` installs the wheel into a project made with
``django-admin startproject`` and follows the tutorial there).

Runs once, in the embedded pass (SQLite + the filesystem broker is what a new project has;
the rest of the suite covers PostgreSQL).
"""

from __future__ import annotations

import re
import sys
import tarfile
import zipfile

import pytest
from django.conf import settings

from tests.cluster import ROOT
from tests.newproject import run

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(
        not settings.DATABASES["default"]["ENGINE"].endswith("sqlite3"),
        reason="runs once, in the embedded pass (a new project starts on SQLite)",
    ),
]


def test_the_wheel_holds_every_migration_and_template_and_nothing_of_the_demo(dist, source):
    names = set(zipfile.ZipFile(dist["wheel"]).namelist())
    package = source / "durableflow"
    shipped = [p.relative_to(source).as_posix() for p in package.rglob("*") if p.is_file()]
    migrations = [name for name in shipped if "/migrations/" in name and name.endswith(".py")]
    templates = [name for name in shipped if "/templates/" in name or "/static/" in name]
    print("wheel migrations:", *migrations, "wheel templates and static files:", *templates, sep="\n  ")

    assert migrations and set(migrations) <= names
    assert set(templates) <= names
    assert {name for name in shipped if name.endswith(".py")} <= names
    assert not {name for name in names if name.startswith(("tests/", "project/", "bench/", "templates/"))}
    import durableflow

    metadata = next(name for name in names if name.endswith(".dist-info/METADATA"))
    text = zipfile.ZipFile(dist["wheel"]).read(metadata).decode()
    assert f"Version: {durableflow.__version__}" in text
    assert "Requires-Python: >=3.11" in text
    assert "Requires-Dist: Django<6.1,>=5.2" in text
    assert "Provides-Extra: postgres" in text
    assert "Provides-Extra: otel" in text and "Requires-Dist: opentelemetry-api<2,>=1.27; extra == \"otel\"" in text


def test_the_sdist_holds_the_package_and_builds_the_same_wheel(dist, source):
    with tarfile.open(dist["sdist"]) as sdist:
        names = {name.split("/", 1)[1] for name in sdist.getnames() if "/" in name}
    assert {"pyproject.toml", "README.md", "durableflow/__init__.py", "durableflow/migrations/0001_initial.py"} <= names
    assert not {name for name in names if name.startswith((".venv", "var/", "bench/.venv"))}


def test_pip_install_from_a_fresh_clone_works(source, tmp_path):
    run([sys.executable, "-m", "pip", "install", "--no-deps", "--target", tmp_path / "site",
         source], cwd=tmp_path)  # fmt: skip
    assert (tmp_path / "site" / "durableflow" / "migrations" / "0001_initial.py").exists()


def test_the_package_imports_nothing_of_the_demo_project():
    imports = re.compile(r"^\s*(from|import)\s+(project|tests|bench)\b", re.M)
    offenders = [
        str(path.relative_to(ROOT)) for path in (ROOT / "durableflow").rglob("*.py") if imports.search(path.read_text())
    ]
    assert offenders == []
