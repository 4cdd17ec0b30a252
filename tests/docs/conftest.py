"""The documentation's tests: the site builds (``mkdocs build --strict``, once per session:
``built_site``), every page's code blocks run (the how-to guides on a worker of their own, the
tutorial in a new project), and the site reads in a real browser.

The blocks are read from ``docs/`` by ``tests/docs_blocks.py``.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.cluster import ROOT


@pytest.fixture(scope="session")
def built_site(tmp_path_factory) -> tuple[Path, str]:
    """``mkdocs build --strict`` into a temporary folder: the site, and what the build printed."""
    site = tmp_path_factory.mktemp("site")
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    env.pop("DJANGO_SETTINGS_MODULE", None)  # the build sets up its own, smallest project
    finished = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    log = finished.stdout + finished.stderr
    assert finished.returncode == 0, log
    return site, log
