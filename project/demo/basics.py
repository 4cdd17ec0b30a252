"""The basics: steps, a durable retry and a durable sleep."""

import hashlib
import random

import durableflow
from durableflow import RetryableError


def fetch_order(order_id: int) -> dict:
    items = [{"sku": f"SKU-{order_id}-{n}", "cents": 250 * (n + 1)} for n in range(3)]
    return {"id": order_id, "items": items}


def price(order: dict) -> int:
    return sum(item["cents"] for item in order["items"])


@durableflow.workflow("demo.order-total", version="1")
def order_total(ctx, params):
    """Three steps: fetch an order, price it, make a receipt number."""
    order = ctx.step.run("fetch-order", fetch_order, params["order_id"])
    total = ctx.step.run("price", price, order)
    receipt = ctx.step.run("receipt", lambda: hashlib.sha1(f"{order['id']}:{total}".encode()).hexdigest()[:10])
    return {"order": order["id"], "total_cents": total, "receipt": receipt}


@durableflow.workflow("demo.flaky-import", version="1")
def flaky_import(ctx, params):
    """A step that fails twice with RetryableError; each retry waits durably for 2 s."""
    failures = int(params.get("failures", 2))

    def attempt():
        # Each failed attempt ends a delivery; the delivery count tells which attempt this is.
        if ctx.delivery <= failures:
            raise RetryableError("the service answered 503", max_attempts=failures + 1, retry_interval=2)
        return {"status": "imported", "deliveries": ctx.delivery}

    return ctx.step.run("import", attempt)


@durableflow.workflow("demo.reminder", version="1")
def reminder(ctx, params):
    """Sleep durably (no worker is held), then pick a lucky number that replays identically."""
    lucky = ctx.step.run("pick-number", lambda: random.randint(1, 100))
    ctx.step.sleep("wait", float(params.get("seconds", 10)))
    sent_at = ctx.now()
    return {"message": params.get("message", "time is up"), "lucky": lucky, "sent_at": sent_at.isoformat()}
