"""durableflow installs like any reusable app: a wheel and an sdist with everything the app
needs, and the README's settings proven in a project made with ``django-admin startproject``.

Runs once, in the embedded pass (SQLite + the filesystem broker is what a new project has;
the rest of the suite covers PostgreSQL).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tarfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

import pytest
from django.conf import settings

from tests.cluster import ROOT, Process, wait_for

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(
        not settings.DATABASES["default"]["ENGINE"].endswith("sqlite3"),
        reason="runs once, in the embedded pass (a new project starts on SQLite)",
    ),
]

README = (ROOT / "README.md").read_text()


def _run(argv: list, cwd: Path, env: dict | None = None, timeout: float = 600) -> str:
    finished = subprocess.run([str(a) for a in argv], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert finished.returncode == 0, f"{argv}:\n{finished.stdout[-3000:]}\n{finished.stderr[-3000:]}"
    return finished.stdout + finished.stderr


def _block(name: str) -> str:
    """The code block the README marks with ``<!-- install:<name> -->``."""
    found = re.search(rf"<!-- install:{name} -->\s*```\w*\n(.*?)```", README, re.S)
    assert found, f"README has no install:{name} block"
    return found.group(1)


@pytest.fixture(scope="module")
def source(tmp_path_factory) -> Path:
    """The files a fresh clone has (what git tracks), nothing of this checkout's state."""
    clone = tmp_path_factory.mktemp("clone")
    tracked = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout
    for name in tracked.decode().split("\0"):
        if name and (ROOT / name).is_file():
            (clone / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, clone / name)
    return clone


@pytest.fixture(scope="module")
def dist(source, tmp_path_factory) -> dict[str, Path]:
    out = tmp_path_factory.mktemp("dist")
    _run([sys.executable, "-m", "build", "--outdir", out, source], cwd=source)
    (wheel,) = out.glob("durableflow-*.whl")
    (sdist,) = out.glob("durableflow-*.tar.gz")
    return {"wheel": wheel, "sdist": sdist}


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


def test_the_sdist_holds_the_package_and_builds_the_same_wheel(dist, source):
    with tarfile.open(dist["sdist"]) as sdist:
        names = {name.split("/", 1)[1] for name in sdist.getnames() if "/" in name}
    assert {"pyproject.toml", "README.md", "durableflow/__init__.py", "durableflow/migrations/0001_initial.py"} <= names
    assert not {name for name in names if name.startswith((".venv", "var/", "bench/.venv"))}


def test_pip_install_from_a_fresh_clone_works(source, tmp_path):
    _run([sys.executable, "-m", "pip", "install", "--no-deps", "--target", tmp_path / "site",
          source], cwd=tmp_path)  # fmt: skip
    assert (tmp_path / "site" / "durableflow" / "migrations" / "0001_initial.py").exists()


def test_the_package_imports_nothing_of_the_demo_project():
    imports = re.compile(r"^\s*(from|import)\s+(project|tests|bench)\b", re.M)
    offenders = [
        str(path.relative_to(ROOT)) for path in (ROOT / "durableflow").rglob("*.py") if imports.search(path.read_text())
    ]
    assert offenders == []


WORKFLOWS = """
import durableflow


@durableflow.workflow("orders.fulfil")
def fulfil(ctx, params):
    count = ctx.step.run("count", len, params["items"])
    ctx.step.sleep("cool-off", 1)  # a durable timer: beat's sweep wakes it
    return {"count": count}
"""


@dataclass
class Shop:
    """A project made by ``django-admin startproject`` with the README's settings, migrated."""

    home: Path
    python: Path
    bin_dir: Path
    env: dict


@pytest.fixture(scope="module")
def shop(dist, tmp_path_factory) -> Shop:
    tmp_path = tmp_path_factory.mktemp("shop")
    venv = tmp_path / "venv"
    _run([sys.executable, "-m", "venv", venv], cwd=tmp_path)
    python, bin_dir = venv / "bin" / "python", venv / "bin"
    _run([python, "-m", "pip", "install", "--quiet", "--disable-pip-version-check", dist["wheel"]], cwd=tmp_path)

    env = {key: value for key, value in os.environ.items() if not key.startswith(("DJANGO", "CELERY", "DATABASE"))}
    env.pop("PYTHONPATH", None)
    env.pop("DURABLEFLOW_VAR_DIR", None)
    _run([bin_dir / "django-admin", "startproject", "shop"], cwd=tmp_path, env=env)
    home = tmp_path / "shop"
    _run([python, "manage.py", "startapp", "orders"], cwd=home, env=env)
    (home / "orders" / "workflows.py").write_text(WORKFLOWS)
    settings_py = home / "shop" / "settings.py"
    settings_py.write_text(
        settings_py.read_text()
        + '\nINSTALLED_APPS += ["orders"]\n'  # the project's own app, not a durableflow setting
        + _block("settings")
        + _block("embedded")
    )
    (home / "shop" / "celery.py").write_text(_block("celery").replace("yourproject", "shop"))
    (home / "shop" / "__init__.py").write_text(_block("init"))

    _run([python, "manage.py", "migrate", "-v", "0"], cwd=home, env=env)
    return Shop(home, python, bin_dir, env)


def test_a_new_project_completes_a_workflow_with_the_readme_settings(shop, tmp_path):
    home, python, bin_dir, env = shop.home, shop.python, shop.bin_dir, shop.env
    checked = _run([python, "manage.py", "check"], cwd=home, env=env)
    assert "durableflow." not in checked, checked

    worker = Process("shop-worker", [bin_dir / "celery", "-A", "shop", "worker", "-Q", "durableflow", "-c", "1",
                                     "-l", "info"], env, tmp_path, cwd=home)  # fmt: skip
    beat = Process("shop-beat", [bin_dir / "celery", "-A", "shop", "beat", "-l", "info"], env, tmp_path, cwd=home)
    try:
        wait_for(lambda: " ready." in worker.log() or not worker.alive(), timeout=60, what="the worker to start")
        assert worker.alive(), worker.log()
        script = (
            "import durableflow; "
            "e = durableflow.start('orders.fulfil', {'items': [1, 2, 3]}); "
            "print('RESULT', durableflow.result(e.id, timeout=60))"
        )
        out = _run([python, "manage.py", "shell", "-c", script], cwd=home, env=env, timeout=120)
        assert "RESULT {'count': 3}" in out, out
    finally:
        worker.stop()
        beat.stop()


API_SCRIPT = """
from django.contrib.auth import get_user_model
from django.test import Client
from django.test.utils import setup_test_environment

setup_test_environment()  # the test client's host, 'testserver', is allowed
user = get_user_model().objects.create_superuser("api-user", password="pw")
client = Client()
print("ANONYMOUS", client.get("/api/durableflow/executions/").status_code)
client.force_login(user)
started = client.post("/api/durableflow/executions/", {"workflow": "orders.fulfil", "params": {"items": [1]}},
                      content_type="application/json")
print("STARTED", started.status_code, started.json()["status"])
listed = [row["id"] for row in client.get("/api/durableflow/executions/").json()["results"]]
print("LISTED", started.json()["id"] in listed)
print("SCHEMA", client.get("/api/durableflow/schema/").json()["openapi"][:2])
print("UNKNOWN", client.post("/api/durableflow/executions/", {"workflow": "nope"},
                             content_type="application/json").json()["code"])
"""


def test_the_readme_url_line_mounts_the_api_in_a_new_project(shop):
    if "<!-- install:urls -->" not in README:
        pytest.skip("README has no install:urls block yet (it comes with the REST API's README section)")
    urls_py = shop.home / "shop" / "urls.py"
    urls_py.write_text(urls_py.read_text() + _block("urls"))

    checked = _run([shop.python, "manage.py", "check"], cwd=shop.home, env=shop.env)
    out = _run([shop.python, "manage.py", "shell", "-c", API_SCRIPT], cwd=shop.home, env=shop.env, timeout=120)

    assert "durableflow." not in checked, checked
    for line in ("ANONYMOUS 403", "STARTED 201 pending", "LISTED True", "SCHEMA 3.", "UNKNOWN UNKNOWN_WORKFLOW"):
        assert line in out, out
