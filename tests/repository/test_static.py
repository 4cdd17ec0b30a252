"""The static checks, in the suite: mypy over the package and ruff over the code (their settings
are in pyproject.toml). Each runs in a few seconds, once per backend; mypy keeps its cache in
var/ (the second run of a suite reuses the first one's)."""

from __future__ import annotations

import subprocess
import sys

from tests.cluster import ROOT


def _run(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", *argv], cwd=ROOT, capture_output=True, text=True, timeout=300)


def test_the_package_type_checks():
    # The storage protocol, both storages (held to it in durableflow/orm/storage.py and
    # durableflow/engine/memory/__init__.py) and the verbs' parts are all in durableflow/.
    done = _run("mypy", "--cache-dir", str(ROOT / "var" / "mypy-cache"), "--no-color-output")
    assert done.returncode == 0, done.stdout + done.stderr


def test_ruff_finds_nothing_and_every_noqa_silences_something():
    done = _run("ruff", "check", "--no-cache", "--output-format", "concise", "durableflow", "tests", "bench")
    assert done.returncode == 0, done.stdout + done.stderr
