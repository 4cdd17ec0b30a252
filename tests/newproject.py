"""A fresh clone and the wheel built from it, shared by the packaging test and the tutorial's.

Session fixtures (``tests/conftest.py`` imports them), so that the wheel is built once.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.cluster import ROOT


def run(argv: list, cwd: Path, env: dict | None = None, timeout: float = 600) -> str:
    """Run ``argv``; its output, or a failure that shows it."""
    finished = subprocess.run([str(a) for a in argv], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert finished.returncode == 0, f"{argv}:\n{finished.stdout[-3000:]}\n{finished.stderr[-3000:]}"
    return finished.stdout + finished.stderr


@pytest.fixture(scope="session")
def source(tmp_path_factory) -> Path:
    """The files a fresh clone has (what git tracks), nothing of this checkout's state."""
    clone = tmp_path_factory.mktemp("clone")
    tracked = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout
    for name in tracked.decode().split("\0"):
        if name and (ROOT / name).is_file():
            (clone / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, clone / name)
    return clone


@pytest.fixture(scope="session")
def dist(source, tmp_path_factory) -> dict[str, Path]:
    out = tmp_path_factory.mktemp("dist")
    run([sys.executable, "-m", "build", "--outdir", out, source], cwd=source)
    (wheel,) = out.glob("durableflow-*.whl")
    (sdist,) = out.glob("durableflow-*.tar.gz")
    return {"wheel": wheel, "sdist": sdist}
