"""Workflows whose code changes with a deploy (``tests/live/test_deploys_live.py``).

``DURABLEFLOW_TEST_DEPLOY=after`` in a worker's environment registers the code after the deploy:
``t.deploy-patched`` gains a step behind ``ctx.patched("audit")``, and ``t.deploy-versions``
gains a version 2 beside version 1. Unset (or ``before``): the code before. ``install(stage)``
swaps the code of the process it runs in (the test process, whose starts must see the deploy
too, as a web process would).
"""

from __future__ import annotations

import os

from durableflow.registry import WorkflowDefinition, registry
from tests.testapp.models import Marker

STAGE_VARIABLE = "DURABLEFLOW_TEST_DEPLOY"


def _mark(tag: str, name: str) -> str:
    Marker.hit(f"{tag}:{name}")
    return name


def _reserve_wait_ship(ctx, tag: str) -> None:
    ctx.step.run("reserve", _mark, tag, "reserve")
    ctx.step.wait_for_signal("go", "go")
    ctx.step.run("ship", _mark, tag, "ship")


def patched_before(ctx, params):
    _reserve_wait_ship(ctx, params["tag"])
    return "old"


def patched_after(ctx, params):
    tag = params["tag"]
    ctx.step.run("reserve", _mark, tag, "reserve")
    branch = "old"
    if ctx.patched("audit"):
        ctx.step.run("audit", _mark, tag, "audit")
        branch = "new"
    ctx.step.wait_for_signal("go", "go")
    ctx.step.run("ship", _mark, tag, "ship")
    return branch


def version_1(ctx, params):
    _reserve_wait_ship(ctx, params["tag"])
    return "1"


def version_2(ctx, params):
    tag = params["tag"]
    ctx.step.wait_for_signal("go", "go")  # reordered: no journal of version 1 replays on this
    ctx.step.run("ship", _mark, tag, "ship-2")
    return "2"


STAGES = {
    "before": [
        WorkflowDefinition("t.deploy-patched", patched_before),
        WorkflowDefinition("t.deploy-versions", version_1, version="1"),
    ],
    "after": [
        WorkflowDefinition("t.deploy-patched", patched_after),
        WorkflowDefinition("t.deploy-versions", version_1, version="1"),
        WorkflowDefinition("t.deploy-versions", version_2, version="2"),
    ],
}


def install(stage: str) -> None:
    """Register the code of ``stage`` (``before`` or ``after``) in place of the other's."""
    for name in {definition.name for definition in STAGES[stage]}:
        registry.unregister(name)
    for definition in STAGES[stage]:
        registry.register(definition)


install(os.environ.get(STAGE_VARIABLE) or "before")
