"""An order waits for a person's review; a rejected, unreviewed or cancelled order gives its stock back."""

import logging

import durableflow

logger = logging.getLogger(__name__)

THREE_DAYS = 3 * 24 * 3600


def reserve_stock(order_id, items):
    logger.info("order %s: reserved %s", order_id, ", ".join(items))
    return {"reservation": f"R-{order_id}", "items": items}


def release_stock(reservation):
    logger.info("released reservation %s", reservation["reservation"])


def ship(order_id):
    logger.info("order %s: shipped", order_id)
    return {"tracking": f"TRACK-{order_id}"}


@durableflow.workflow("orders.approval", version="1")
def order_approval(ctx, params):
    """Reserve the stock, wait up to three days for a review, then ship (or release the stock)."""
    order_id = params["order_id"]
    reservation = ctx.step.run("reserve", reserve_stock, order_id, params["items"], compensate=release_stock)
    review = ctx.step.wait_for_event("review", "order.reviewed", match={"order_id": order_id}, timeout=THREE_DAYS)
    if not review["approved"]:
        ctx.compensate()  # runs release_stock; the execution ends "compensated"
    shipment = ctx.step.run("ship", ship, order_id)
    return {"reservation": reservation["reservation"], "tracking": shipment["tracking"]}
