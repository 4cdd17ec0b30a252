"""The engine is plain Python: it imports neither Django nor Celery."""

from __future__ import annotations

import subprocess
import sys

from tests.cluster import ROOT


def test_the_engine_imports_no_django_and_no_celery():
    script = (
        "import sys, durableflow.engine.driver, durableflow.engine.memory, durableflow.testing, durableflow; "
        "bad = sorted({m.split('.')[0] for m in sys.modules} & {'django', 'celery', 'kombu', 'rest_framework'}); "
        "print(','.join(bad))"
    )
    found = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, check=True)
    assert found.stdout.strip() == ""
