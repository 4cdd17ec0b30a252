"""The tutorial, followed to the letter in a new project: ``django-admin startproject mysite``
and ``startapp orders``, then every block of ``docs/tutorial.md`` in order, with the wheel
as the package ``pip install`` finds, a real worker and beat, and the admin and the REST API
checked at the end.

What the test does for each block:

- ``console``: each ``$`` command runs in the project with the project's virtualenv; ``celery``
  and ``runserver`` run in the background until the end (``runserver`` on a free port, which
  the later ``curl`` uses), ``createsuperuser`` without prompts;
- ``python`` with a file's title: the block is added at the end of that file;
- ``python`` titled ``python manage.py shell``: run with ``manage.py shell -c``, once the
  worker has nothing left to do (a reader is slower than a worker); each ``print(...)  # text``
  line must print that text.

Runs once, in the embedded pass: a new project starts on SQLite.
"""

from __future__ import annotations

import json
import os
import shlex
import socket
import sys
from pathlib import Path

import pytest
from django.conf import settings

from tests.cluster import ROOT, Process, wait_for
from tests.docs_blocks import Block, blocks
from tests.newproject import run

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(
        not settings.DATABASES["default"]["ENGINE"].endswith("sqlite3"),
        reason="runs once, in the embedded pass (a new project starts on SQLite)",
    ),
]

PAGE = "tutorial.md"
SHELL = "python manage.py shell"

QUIET = """
import time
from durableflow.models import Execution
deadline = time.monotonic() + 60
while Execution.objects.filter(status__in=["pending", "running"]).exists() and time.monotonic() < deadline:
    time.sleep(0.2)
print("BUSY", list(Execution.objects.filter(status__in=["pending", "running"]).values_list("id", "status")))
"""

ADMIN = """
from django.test import Client
from django.test.utils import setup_test_environment

setup_test_environment()  # the test client's host, 'testserver', is allowed
client = Client()
assert client.login(username="admin", password="password")
listing = client.get("/admin/durableflow/execution/").content.decode()
for status in ("completed", "compensated", "cancelled"):
    print("LISTED", status, status in listing)
page = client.get("/admin/durableflow/execution/order-43/change/").content.decode()
print("JOURNAL", "reserve" in page and "review" in page)
"""

API = """
from django.contrib.auth import get_user_model
from django.test import Client
from django.test.utils import setup_test_environment

setup_test_environment()
user = get_user_model().objects.create_superuser("api-user", password="pw")
client = Client()
print("ANONYMOUS", client.get("/api/durableflow/executions/").status_code)
client.force_login(user)
started = client.post("/api/durableflow/executions/",
                      {"workflow": "orders.approval", "params": {"order_id": 50, "items": ["lamp"]}},
                      content_type="application/json")
print("STARTED", started.status_code, started.json()["status"])
listed = [row["id"] for row in client.get("/api/durableflow/executions/").json()["results"]]
print("LISTED", started.json()["id"] in listed)
print("SCHEMA", client.get("/api/durableflow/schema/").json()["openapi"][:2])
print("UNKNOWN", client.post("/api/durableflow/executions/", {"workflow": "nope"},
                             content_type="application/json").json()["code"])
"""


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class Reader:
    """Someone following the tutorial in ``home``, with the project's virtualenv."""

    def __init__(self, home: Path, venv: Path, wheel: Path, logs: Path) -> None:
        self.home, self.venv, self.wheel, self.logs = home, venv, wheel, logs
        self.env = {key: value for key, value in os.environ.items() if not key.startswith(("DJANGO", "CELERY"))}
        for name in ("PYTHONPATH", "DATABASE_URL", "DURABLEFLOW_VAR_DIR"):
            self.env.pop(name, None)
        self.env["PATH"] = f"{venv / 'bin'}{os.pathsep}{self.env['PATH']}"
        self.env.update(DJANGO_SUPERUSER_USERNAME="admin", DJANGO_SUPERUSER_EMAIL="admin@example.com",
                        DJANGO_SUPERUSER_PASSWORD="password")  # fmt: skip
        self.background: list[Process] = []
        self.port = _free_port()
        self.worker_started = False

    def python(self) -> str:
        return str(self.venv / "bin" / "python")

    def follow(self, block: Block) -> None:
        if block.language == "console":
            for command in block.commands():
                self.command(command)
        elif block.language == "python" and block.title == SHELL:
            self.shell(block)
        elif block.language == "python" and block.title:
            path = self.home / block.title
            previous = path.read_text() if path.exists() else ""
            path.write_text(previous + ("\n" if previous else "") + block.text)
        else:
            raise AssertionError(f"{block}: the tutorial test does not know how to run this block")

    def command(self, command: str) -> None:
        argv = shlex.split(command)
        if argv[:4] == ["python", "-m", "pip", "install"]:
            # The package the reader installs is the wheel built from this checkout.
            argv = [self.python(), "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
                    *[str(self.wheel) + arg[len("durableflow"):] if arg.startswith("durableflow") else arg
                      for arg in argv[4:]]]  # fmt: skip
            run(argv, cwd=self.home, env=self.env)
        elif argv[:2] == ["python", "manage.py"]:
            self.manage(argv[2:])
        elif argv[0] == "celery":
            name = f"tutorial-{argv[3]}"
            process = Process(name, [str(self.venv / "bin" / "celery"), *argv[1:]], self.env, self.logs, cwd=self.home)
            self.background.append(process)
            if argv[3] == "worker":
                wait_for(lambda: " ready." in process.log() or not process.alive(), timeout=60, what="the worker")
                assert process.alive(), process.log()
                self.worker_started = True
        elif argv[0] == "curl":
            url = argv[-1].replace("127.0.0.1:8000", f"127.0.0.1:{self.port}")
            answer = json.loads(run([*argv[:-1], "--fail", "--silent", url], cwd=self.home, env=self.env))
            assert answer["id"] == "order-42" and answer["status"] == "completed", answer
        else:
            raise AssertionError(f"the tutorial test does not know the command {command!r}")

    def manage(self, args: list[str]) -> None:
        if args == ["runserver"]:
            argv = [self.python(), "manage.py", "runserver", f"127.0.0.1:{self.port}", "--noreload"]
            self.background.append(Process("tutorial-web", argv, self.env, self.logs, cwd=self.home))
            wait_for(self._web_answers, timeout=60, what="runserver to answer")
            return
        if args == ["createsuperuser"]:
            args = [*args, "--noinput"]
        out = run([self.python(), "manage.py", *args], cwd=self.home, env=self.env, timeout=300)
        if args == ["check"]:
            assert "durableflow." not in out, out
        if args[:1] == ["test"]:
            assert "\nOK" in out, out

    def _web_answers(self) -> bool:
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=1):
                return True
        except OSError:
            return False

    def shell(self, block: Block) -> str:
        if self.worker_started:
            quiet = self.run_script(QUIET)
            assert "BUSY []" in quiet, quiet
        out = self.run_script(block.text)
        for text in block.expected_prints():
            assert text in out, f"{block}: expected {text!r} in its output:\n{out}"
        return out

    def run_script(self, script: str) -> str:
        return run([self.python(), "manage.py", "shell", "-c", script], cwd=self.home, env=self.env, timeout=120)

    def stop(self) -> None:
        for process in reversed(self.background):
            process.stop()


@pytest.fixture
def reader(dist, tmp_path):
    venv = tmp_path / "venv"
    run([sys.executable, "-m", "venv", venv], cwd=tmp_path)
    reader = Reader(tmp_path / "mysite", venv, dist["wheel"], tmp_path)
    # Before the tutorial: an existing project with an app (Django installed, as it would be).
    run([reader.python(), "-m", "pip", "install", "--quiet", "--disable-pip-version-check", "Django>=5.2,<6.1"],
        cwd=tmp_path, env=reader.env)  # fmt: skip
    run([venv / "bin" / "django-admin", "startproject", "mysite"], cwd=tmp_path, env=reader.env)
    run([reader.python(), "manage.py", "startapp", "orders"], cwd=reader.home, env=reader.env)
    settings_py = reader.home / "mysite" / "settings.py"
    settings_py.write_text(settings_py.read_text() + '\nINSTALLED_APPS += ["orders"]\n')
    yield reader
    reader.stop()


@pytest.mark.timeout(900)
def test_the_tutorial_works_in_a_new_project(reader):
    followed = blocks(PAGE)
    assert [b for b in followed if b.title == "orders/workflows.py"], "the tutorial writes orders/workflows.py"
    for block in followed:
        reader.follow(block)

    admin = reader.run_script(ADMIN)
    for line in ("LISTED completed True", "LISTED compensated True", "LISTED cancelled True", "JOURNAL True"):
        assert line in admin, admin

    api = reader.run_script(API)
    for line in ("ANONYMOUS 403", "STARTED 201 pending", "LISTED True", "SCHEMA 3.", "UNKNOWN UNKNOWN_WORKFLOW"):
        assert line in api, api


def test_the_tutorials_workflow_is_the_demos():
    (workflow,) = [b for b in blocks(PAGE) if b.title == "orders/workflows.py"]
    demo = ROOT / "project" / "demo" / "orders.py"
    assert workflow.text == demo.read_text()
