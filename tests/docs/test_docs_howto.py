"""Every code block of the how-to guides runs, on both backends, against a real worker.

What the test does with each block of a page (``tests/docs_blocks.py`` reads them):

- ``python`` titled with a module (``contracts/workflows.py``): the page's blocks of that kind,
  in order, make one module, imported by this process and by a worker started for the guides
  (``tests.docs_settings``: its own queue, ``docs``); the module's ``test_*`` functions are
  called, as pytest would;
- ``python`` titled ``settings.py``: run over the test settings; the ``DURABLEFLOW`` dict it
  leaves must pass durableflow's own checks, and beat entries must name durableflow's tasks;
- ``python`` without a title: run in order, in one namespace per page that starts as the page's
  module, with starts going to the guides' queue; ``print(...)  # text`` must print that text;
- ``console``: ``python manage.py ...`` runs with the worker's settings; ``celery ... worker`` and
  ``celery ... beat`` start (for the project's Celery app) and are stopped once running; ``curl``
  calls a live server of the test project;
- ``json`` must parse; ``text`` is shown output and is not run. Any other block fails the test.
"""

from __future__ import annotations

import contextlib
import importlib
import io
import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from django.conf import settings
from django.test import override_settings

from tests.cluster import ROOT, Cluster, Process, wait_for
from tests.docs_blocks import Block, blocks, pages

pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]

PAGES = pages("how-to")
QUEUE = "docs"


def module_name(page: str) -> str:
    return "docs_" + re.sub(r"\W", "_", Path(page).stem)


def is_module(block: Block) -> bool:
    return block.language == "python" and block.title.endswith(".py") and not block.title.endswith(SETTINGS)


SETTINGS = ("settings.py", "urls.py")


@pytest.fixture(scope="module")
def guides(tmp_path_factory):
    """The pages' modules, written where this process and the worker import them from."""
    folder = tmp_path_factory.mktemp("guides")
    names = []
    for page in PAGES:
        parts = [block.text for block in blocks(page) if is_module(block)]
        if parts:
            (folder / f"{module_name(page)}.py").write_text("\n\n".join(parts))
            names.append(module_name(page))
    sys.path.insert(0, str(folder))
    yield folder, names
    sys.path.remove(str(folder))


@pytest.fixture(scope="module")
def guide_env(cluster, guides, django_db_blocker):
    from django.db import connection

    folder, names = guides
    return {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "tests.docs_settings",
        "DURABLEFLOW_TEST_DB_NAME": str(connection.settings_dict["NAME"]),
        "DURABLEFLOW_DOCS_MODULES": ",".join(names),
        "PYTHONPATH": os.pathsep.join([str(ROOT), str(folder)]),
    }


@pytest.fixture(scope="module")
def guide_worker(guide_env, tmp_path_factory):
    """One worker on the guides' queue (the session's beat runs the sweep for it)."""
    workers = Cluster(guide_env, tmp_path_factory.mktemp("guide-logs"))
    try:
        yield workers.worker(QUEUE, concurrency=1)
    finally:
        workers.stop_all()


@pytest.fixture(scope="module")
def live_server(django_db_blocker):
    from tests.browser import AdminServer

    with django_db_blocker.unblock():
        server = AdminServer()
        try:
            yield server
        finally:
            server.stop()


class Page:
    def __init__(self, page: str, env: dict, request) -> None:
        self.page, self.env, self.request = page, env, request
        self.namespace: dict = {"__name__": f"guide_{module_name(page)}"}
        self.called: set[str] = set()

    def run(self, block: Block) -> None:
        if is_module(block):
            return  # imported before the page's first block
        if block.language == "python" and block.title.endswith("settings.py"):
            self.settings(block)
        elif block.language == "python" and block.title.endswith("urls.py"):
            self.urls(block)
        elif block.language == "python" and not block.title:
            self.python(block)
        elif block.language == "console":
            for command in block.commands():
                self.command(block, command)
        elif block.language == "json":
            json.loads(block.text)
        elif block.language != "text":
            raise AssertionError(f"{block}: the how-to test does not know how to run this block")

    def python(self, block: Block) -> None:
        out = io.StringIO()
        queue = {**settings.DURABLEFLOW, "DEFAULT_QUEUE": QUEUE}
        with override_settings(DURABLEFLOW=queue), contextlib.redirect_stdout(out):
            exec(compile(block.text, str(block), "exec"), self.namespace)
            self.call_tests()
        for text in block.expected_prints():
            assert text in out.getvalue(), f"{block}: expected {text!r} in its output:\n{out.getvalue()}"

    def call_tests(self) -> None:
        for name, value in list(self.namespace.items()):
            if name.startswith("test_") and callable(value) and name not in self.called:
                self.called.add(name)
                value()

    def settings(self, block: Block) -> None:
        from durableflow import dispatch
        from durableflow.conf import DEFAULTS, df_settings

        namespace = {name: getattr(settings, name) for name in dir(settings) if name.isupper()}
        namespace["BASE_DIR"] = ROOT
        exec(compile(block.text, str(block), "exec"), namespace)
        with override_settings(DURABLEFLOW=namespace.get("DURABLEFLOW", {})):
            for name in DEFAULTS:
                getattr(df_settings, name)  # ImproperlyConfigured for a bad value
        for entry in namespace.get("CELERY_BEAT_SCHEDULE", {}).values():
            assert entry["task"] in dispatch.TASKS, f"{block}: {entry['task']} is not a durableflow task"

    def urls(self, block: Block) -> None:
        from django.urls import resolve

        namespace: dict = {"urlpatterns": []}
        exec(compile(block.text, str(block), "exec"), namespace)
        # The patterns the block mounts resolve the API's paths, as the project's own urls.py does.
        assert resolve("/api/durableflow/executions/", urlconf=_Urlconf(namespace["urlpatterns"])).view_name

    def command(self, block: Block, command: str) -> None:
        argv = shlex.split(command)
        if argv[:2] == ["python", "manage.py"]:
            finished = subprocess.run([sys.executable, *argv[1:]], cwd=ROOT, env=self.env, capture_output=True,
                                      text=True, timeout=300)  # fmt: skip
            assert finished.returncode == 0, f"{block}: {command}\n{finished.stdout}\n{finished.stderr}"
        elif argv[0] == "celery" and argv[3] in ("worker", "beat"):
            self.celery(block, argv)
        elif argv[0] == "curl":
            server = self.request.getfixturevalue("live_server")
            argv = [arg.replace("http://127.0.0.1:8000", server.url) for arg in argv]
            finished = subprocess.run([*argv, "--fail-with-body", "--silent", "--show-error"],
                                      capture_output=True, text=True, timeout=60)  # fmt: skip
            assert finished.returncode == 0, f"{block}: {command}\n{finished.stdout}\n{finished.stderr}"
            json.loads(finished.stdout)
        else:
            raise AssertionError(f"{block}: the how-to test does not know the command {command!r}")

    def celery(self, block: Block, argv: list[str]) -> None:
        # The page's own project is "yourproject"; here the Celery app is the test project's.
        argv = [sys.executable, "-m", "celery", "-A", "project", *argv[3:]]
        if argv[5] == "beat":
            argv += ["--pidfile=", "-s", str(self.request.getfixturevalue("tmp_path") / "beat-schedule")]
        logs = self.request.getfixturevalue("tmp_path")
        process = Process(f"guide-{argv[5]}", argv, self.env, logs)
        ready = " ready." if argv[5] == "worker" else "beat: Starting"
        try:
            wait_for(lambda: ready in process.log() or not process.alive(), timeout=60, what=f"{block}: {argv}")
            assert process.alive(), process.log()
        finally:
            process.stop()


class _Urlconf:
    def __init__(self, urlpatterns: list) -> None:
        self.urlpatterns = urlpatterns


@pytest.mark.parametrize("page", PAGES)
def test_every_block_of_the_guide_runs(page, guides, guide_env, guide_worker, live_db, request):
    followed = blocks(page)
    runner = Page(page, guide_env, request)
    if any(is_module(block) for block in followed):
        module = importlib.import_module(module_name(page))
        runner.namespace.update({k: v for k, v in vars(module).items() if not k.startswith("__")})
    for block in followed:
        runner.run(block)
    runner.call_tests()
    assert guide_worker.alive(), guide_worker.log()
