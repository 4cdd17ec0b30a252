"""Rate-limited steps on real workers: each body writes a marker, so a test counts what ran."""

import durableflow
from tests.testapp.models import Marker


@durableflow.workflow("t.rate-limited")
def rate_limited(ctx, params):
    """``params["steps"]`` steps sharing one limiter key: at most 5 admitted in any 2 seconds."""
    tag = params["tag"]
    limit = durableflow.RateLimit(f"rl:{tag}", 5, 2.0)
    return [
        ctx.step.run(f"call-{i}", Marker.hit, f"{tag}:{params['run']}:{i}", rate_limit=limit)
        for i in range(params["steps"])
    ]


@durableflow.workflow("t.rate-limited-admin")
def rate_limited_admin(ctx, params):
    """One unit an hour: the first run is admitted, the next one waits."""
    return ctx.step.run("call", lambda n: n, params["n"], rate_limit=durableflow.RateLimit("admin-api", 1, 3600.0))
