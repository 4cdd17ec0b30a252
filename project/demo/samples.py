"""The runs ``./run demo`` starts, so that the admin has one of each thing to show.

Every start has an idempotency key, so starting the samples again (a second ``./run demo`` on
the same database) returns the runs it started before instead of adding new ones.
"""

from __future__ import annotations

import durableflow
from durableflow import operations
from project.demo import documents, warehouse

PICK_LIST = "aisle-7"


def start() -> list[tuple[str, str]]:
    """Start the samples; ``(what it shows, execution id)`` for each."""
    started = []

    def begin(what, workflow, params, key):
        execution = durableflow.start(workflow, params, idempotency_key=f"demo:{key}")
        started.append((what, workflow, execution.id))
        return execution

    # The tutorial's workflow: one order waits for its review, one is approved, one rejected.
    begin("waits for its review", "orders.approval", {"order_id": 1001, "items": ["lamp", "desk"]}, "order-1001")
    begin("approved: ships", "orders.approval", {"order_id": 1002, "items": ["chair"]}, "order-1002")
    begin("rejected: compensated", "orders.approval", {"order_id": 1003, "items": ["sofa"]}, "order-1003")
    durableflow.send_event("order.reviewed", {"order_id": 1002, "approved": True}, event_id="demo:review-1002")
    durableflow.send_event("order.reviewed", {"order_id": 1003, "approved": False}, event_id="demo:review-1003")

    # A saga: the car is sold out, so the hotel and the flight are cancelled again.
    begin("booked", "trips.book", {"trip_id": 1, "city": "Lisbon"}, "trip-1")
    begin("car sold out: compensated", "trips.book", {"trip_id": 2, "city": "Porto", "car": "sold out"}, "trip-2")

    # A shared store: two items, three pickers; the third waits on the store.
    if durableflow.stores.get(warehouse.PickList, PICK_LIST).version == 0:
        durableflow.stores.update(
            warehouse.PickList, PICK_LIST, lambda draft: draft["items"].extend(["mug", "kettle"]), expected_version=0
        )
    for n in (1, 2, 3):
        params = {"list": PICK_LIST, "picker": f"picker-{n}"}
        begin(f"picker {n} of 3 takes an item", "warehouse.picker", params, f"pick-{n}")

    # An effect: the provider's first answer is lost; the step looks the charge up, never charges twice.
    invoice = {"invoice": 501, "cents": 12_900, "lose_answer": True}
    begin("paid once, answer lost", "payments.invoice", invoice, "inv-501")

    # A JSON document: a low-risk claim is paid, a high-risk one waits for its approval.
    if not _document_saved("claims.review"):
        operations.save_document("claims.review", documents.CLAIM_REVIEW)
    begin("low risk: paid", "claims.review", {"claim": "C-1", "cents": 4_000}, "claim-1")
    begin("high risk: waits for approval", "claims.review", {"claim": "C-2", "cents": 90_000}, "claim-2")

    # The basics: a durable retry and a durable sleep.
    begin("retried twice", "demo.flaky-import", {}, "flaky")
    begin("sleeps 15 s", "demo.reminder", {"seconds": 15, "message": "the demo reminder fired"}, "reminder")
    return started


def _document_saved(name: str) -> bool:
    from durableflow.models import WorkflowDocument

    return WorkflowDocument.objects.filter(name=name).exists()
