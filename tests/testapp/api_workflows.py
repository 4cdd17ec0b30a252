"""Workflows the REST API tests run on real workers."""

import durableflow
from tests.testapp.models import Marker


def _fail_first(tag: str) -> str:
    Marker.hit(f"{tag}:attempt")
    if Marker.count(f"{tag}:attempt") == 1:
        raise ValueError("the first attempt fails (no retry= on the step): the run fails")
    return "ok"


@durableflow.workflow("t.api-fail-once")
def fail_once(ctx, params):
    return ctx.step.run("flaky", _fail_first, params["tag"])


@durableflow.workflow("t.api-approval")
def approval(ctx, params):
    """For the events/tokens test over HTTP (wait_for_event, then wait_for_token)."""
    approved = ctx.step.wait_for_event("approved", "order.approved", match={"order": params["order"]}, timeout=60)
    signed = ctx.step.wait_for_token("sign-off", timeout=60)
    return {"approved": approved, "signed": signed}
