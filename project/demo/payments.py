"""An invoice is paid through a fake payment provider, at most once in effect.

The provider keeps its charges in its own table (``FakeCharge``), is idempotent by key, and can
tell that a key was never charged. With ``"lose_answer": true`` its first answer is lost after
the charge went through, as a timeout would lose it: the step then looks the charge up instead
of charging again.
"""

import durableflow
from project.demo.models import FakeCharge


class AnswerLost(Exception):
    """The provider charged, but its answer never came back."""


class FakePaymentProvider:
    def charge(self, cents, *, idempotency_key, lose_answer=False):
        charge, created = FakeCharge.objects.get_or_create(idempotency_key=idempotency_key, defaults={"cents": cents})
        if not created:
            FakeCharge.objects.filter(pk=charge.pk).update(calls=charge.calls + 1)
        if created and lose_answer:
            raise AnswerLost(f"timed out waiting for the provider (key {idempotency_key})")
        return {"charge": f"ch_{charge.pk}", "cents": charge.cents}

    def find(self, idempotency_key):
        charge = FakeCharge.objects.filter(idempotency_key=idempotency_key).first()
        return None if charge is None else {"charge": f"ch_{charge.pk}", "cents": charge.cents}


provider = FakePaymentProvider()


def lookup_charge(effect_id):
    found = provider.find(effect_id)
    if found is not None:
        return {"status": "settled", "result": found}
    # This provider charges within the call, so no charge can still arrive once none is found.
    return {"status": "not-found"}


@durableflow.workflow("payments.invoice", version="1")
def pay_invoice(ctx, params):
    """Charge the invoice's amount once, whatever crashes or lost answers happen on the way."""
    cents = params["cents"]
    receipt = ctx.step.effect(
        "charge",
        effect_id=f"invoice-{params['invoice']}",  # the provider's idempotency key
        operation="fake-payments.charge/v1",
        input={"cents": cents},
        retry_in=2,  # seconds before an uncertain outcome is looked up
        lookup=lookup_charge,
        perform=lambda effect_id: provider.charge(
            cents, idempotency_key=effect_id, lose_answer=params.get("lose_answer", False)
        ),
    )
    return {"invoice": params["invoice"], **receipt}
