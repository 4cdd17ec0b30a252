"""A fresh clone and the wheel built from it, shared by the packaging test and the tutorial's.

The session fixtures ``source`` and ``dist`` (in ``tests/conftest.py``) build the wheel once.
"""

from __future__ import annotations

import subprocess
from pathlib import Path


def run(argv: list, cwd: Path, env: dict | None = None, timeout: float = 600) -> str:
    """Run ``argv``; its output, or a failure that shows it."""
    finished = subprocess.run([str(a) for a in argv], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert finished.returncode == 0, f"{argv}:\n{finished.stdout[-3000:]}\n{finished.stderr[-3000:]}"
    return finished.stdout + finished.stderr
