"""A workflow written as a JSON document: the tasks it may call, and the document itself."""

import durableflow


@durableflow.task("claims.assess", version="1")
def assess(input):
    return {"claim": input["claim"], "cents": input["cents"], "risk": "high" if input["cents"] > 50_000 else "low"}


@durableflow.task("claims.pay", version="1")
def pay(input):
    return {"paid": input["claim"]}


# Saved by the demo (``samples.start``) as the document "claims.review": low-risk claims are paid
# at once, high-risk ones wait for an "claim.approved" event for at most a day.
CLAIM_REVIEW = {
    "$workflow": "0.2",
    "revision": "r1",
    "initial": "assess",
    "states": {
        "assess": {
            "work": {"task": "claims.assess", "version": "1"},
            "input": "input",
            "then": "route",
            "catch": "rejected",
        },
        "route": {"choose": [{"guard": "data.risk == 'high'", "to": "review"}], "otherwise": "pay"},
        "review": {
            "on": [{"event": "claim.approved", "guard": "event.payload.claim == data.claim", "to": "pay"}],
            "after": {"ms": 86_400_000, "to": "rejected"},
        },
        "pay": {"work": {"task": "claims.pay", "version": "1"}, "input": "data", "then": "paid"},
        "paid": {"final": True},
        "rejected": {"final": True},
    },
}
