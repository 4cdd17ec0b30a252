"""Workflows for the concurrency-key tests on real workers.

Each body writes a ``Marker`` row as it starts and as it ends its work; rows are numbered in
the order they were written, so a test reads off them whether two runs of a key overlapped.
"""

from __future__ import annotations

import os
import signal

import durableflow
from tests.testapp.models import Marker


def _kill_once(tag: str) -> None:
    """SIGKILL the process running this step, the first time only (the holder dies mid-step)."""
    if Marker.count(f"{tag}:killed") == 0:
        Marker.hit(f"{tag}:killed")
        os.kill(os.getpid(), signal.SIGKILL)


@durableflow.workflow("t.per-customer", concurrency=durableflow.Concurrency(key="params.customer", limit=1))
def per_customer(ctx, params):
    """One run per customer at once: a start mark, a durable nap (the slot stays held), an end mark."""
    who = f"{params['tag']}:{params['customer']}"
    ctx.step.run("start", Marker.hit, f"{who}:start:{params['n']}")
    if params.get("kill"):
        ctx.step.run("kill", _kill_once, params["tag"])
    ctx.step.sleep("nap", params.get("nap", 0.3))
    ctx.step.run("end", Marker.hit, f"{who}:end:{params['n']}")
    return params["n"]
