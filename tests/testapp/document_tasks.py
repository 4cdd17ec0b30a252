"""Tasks the workflow documents of the test suite run (``@durableflow.task``).

In-process tests count calls in ``calls``; tasks that run on worker processes mark rows
(``Marker``) that the test process counts.
"""

from __future__ import annotations

import time
from pathlib import Path

import durableflow

calls: dict[str, int] = {}


def _count(name: str) -> int:
    calls[name] = calls.get(name, 0) + 1
    return calls[name]


@durableflow.task("t.double", version="1")
def double(value):
    _count("t.double")
    return value * 2


@durableflow.task("t.total", version="1")
def total(order):
    _count("t.total")
    return {"id": order["id"], "total": sum(order["items"])}


@durableflow.task("t.echo", version="1")
def echo(value):
    _count("t.echo")
    return value


@durableflow.task("t.echo", version="2")
def echo_v2(value):
    _count("t.echo.v2")
    return {"v2": value}


@durableflow.task("t.fail", version="1")
def fail(value):
    _count("t.fail")
    raise LookupError(f"no such order: {value!r}")


@durableflow.task("t.add", version="1")
def add(values):
    _count("t.add")
    return sum(values.values()) if isinstance(values, dict) else sum(values)


# On real workers ---------------------------------------------------------------------------


@durableflow.task("t.mark", version="1")
def mark(item):
    """Mark ``item["tag"]`` as run (a row the test process counts); return ``item["value"]``."""
    from tests.testapp.models import Marker

    Marker.hit(item["tag"])
    return item.get("value")


@durableflow.task("t.hold", version="1")
def hold(item):
    """Mark that it started, then hold until the file ``item["release"]`` exists (or 60 s)."""
    from tests.testapp.models import Marker

    Marker.hit(item["tag"])
    release = Path(item["release"])
    deadline = time.monotonic() + 60
    while not release.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    return item.get("value")
