"""The demo's samples (``project/demo/samples.py``, what ``./run demo`` starts), on a real worker:
the admin shows runs waiting and compensated, a store with a waiter and a settled effect."""

from __future__ import annotations

import pytest
from django.test import Client

from tests.cluster import wait_for


def _status(execution_id: str) -> str:
    from durableflow.models import Execution

    return Execution.objects.get(pk=execution_id).status


@pytest.fixture(scope="module")
def samples(cluster, django_db_blocker):
    from project.demo import samples

    with django_db_blocker.unblock():
        started = {f"{workflow}:{what}": execution_id for what, workflow, execution_id in samples.start()}
        again = {f"{workflow}:{what}": execution_id for what, workflow, execution_id in samples.start()}
    assert again == started, "a second start returns the same runs"
    return started


@pytest.fixture
def admin_client(live_db):
    from django.contrib.auth import get_user_model

    user, _ = get_user_model().objects.get_or_create(username="demo-admin", is_staff=True, is_superuser=True)
    client = Client()
    client.force_login(user)
    return client


EXPECTED = {
    "orders.approval:waits for its review": "waiting",
    "orders.approval:approved: ships": "completed",
    "orders.approval:rejected: compensated": "compensated",
    "trips.book:booked": "completed",
    "trips.book:car sold out: compensated": "compensated",
    "payments.invoice:paid once, answer lost": "completed",
    "claims.review:low risk: paid": "completed",
    "claims.review:high risk: waits for approval": "waiting",
    "demo.flaky-import:retried twice": "completed",
}


def _settled(samples) -> None:
    for name, status in EXPECTED.items():
        wait_for(lambda: _status(samples[name]) == status, timeout=90, what=f"{name} to be {status}")
    pickers = [id for name, id in samples.items() if name.startswith("warehouse.picker")]
    wait_for(lambda: sorted(map(_status, pickers)) == ["completed", "completed", "waiting"], timeout=90,
             what="two pickers to take an item each and the third to wait")  # fmt: skip


def test_the_samples_end_as_the_demo_says(samples, live_db):
    from project.demo.models import FakeCharge

    _settled(samples)
    (charge,) = FakeCharge.objects.filter(idempotency_key="invoice-501")
    assert (charge.cents, charge.calls) == (12_900, 1), "charged once, never asked twice: the lost answer was looked up"


def test_the_admin_shows_waiting_compensated_a_store_with_waiters_and_a_settled_effect(samples, admin_client):
    from durableflow.models import Effect, Store

    _settled(samples)

    for workflow in ("orders.approval", "trips.book"):
        listing = admin_client.get(f"/admin/durableflow/execution/?q={workflow}").content.decode()
        assert "compensated" in listing and samples[f"{workflow}:booked" if workflow == "trips.book" else
                                                     f"{workflow}:waits for its review"] in listing  # fmt: skip
    waiting = admin_client.get("/admin/durableflow/execution/?q=orders.approval&status__exact=waiting").content.decode()
    assert samples["orders.approval:waits for its review"] in waiting

    order = admin_client.get(f"/admin/durableflow/execution/{samples['orders.approval:rejected: compensated']}/change/")
    assert order.status_code == 200 and "Compensations" in order.content.decode()

    store = Store.objects.get(name="warehouse.pick-list", store_id="aisle-7")
    page = admin_client.get(f"/admin/durableflow/store/{store.pk}/change/").content.decode()
    waiting_picker = next(
        id for name, id in samples.items() if name.startswith("warehouse.picker") and _status(id) == "waiting"
    )
    assert waiting_picker in page, "the store's page lists the waiting picker"

    effect = Effect.objects.get(pk="invoice-501")
    assert (effect.status, effect.attempts) == ("settled", 2)
    effects = admin_client.get("/admin/durableflow/effect/?status__exact=settled").content.decode()
    assert "invoice-501" in effects
