"""A small fake external payment service, kept in the database so that every worker process
(and every crash) counts in the same place.

It is deliberately not idempotent: each ``perform`` that gets through makes a new charge, so
``charges(effect_id)`` is how many times the operation happened in effect. ``lookup`` answers
from its own records. A test tells it what to do at its next calls with ``will(...)``:

- perform: ``raise-before`` (refuse without charging), ``raise-after`` (charge, then lose the
  reply), ``hang-after`` (charge, then hang until the worker is killed), ``slow-after`` (charge,
  then take a moment to answer);
- lookup: ``unknown``, ``raise``.
"""

from __future__ import annotations

import os
import time

from django.db import transaction

from tests.testapp.models import ServiceCall, ServiceCharge, ServiceScript

__all__ = ["perform", "lookup", "will", "charges", "calls"]


def will(effect_id: str, call: str, *actions: str) -> None:
    ServiceScript.objects.bulk_create(ServiceScript(effect_id=effect_id, call=call, action=a) for a in actions)


def charges(effect_id: str | None = None) -> int:
    rows = ServiceCharge.objects.all()
    return (rows if effect_id is None else rows.filter(effect_id=effect_id)).count()


def calls(effect_id: str, call: str | None = None, *, pid: int | None = None) -> int:
    rows = ServiceCall.objects.filter(effect_id=effect_id)
    if call is not None:
        rows = rows.filter(call=call)
    if pid is not None:
        rows = rows.filter(pid=pid)
    return rows.count()


def _next_action(effect_id: str, call: str) -> str | None:
    with transaction.atomic():
        row = ServiceScript.objects.select_for_update().filter(effect_id=effect_id, call=call).order_by("id").first()
        if row is None:
            return None
        row.delete()
        return row.action


def perform(effect_id: str) -> dict:
    action = _next_action(effect_id, "perform")
    pid = os.getpid()
    if action == "raise-before":
        ServiceCall.objects.create(effect_id=effect_id, call="perform", outcome="refused", pid=pid)
        raise ConnectionError(f"the service refused {effect_id}")
    with transaction.atomic():  # the work and its count commit together, or not at all
        ServiceCall.objects.create(effect_id=effect_id, call="perform", outcome="charged", pid=pid)
        charge = ServiceCharge.objects.create(effect_id=effect_id, pid=pid)
        charge.result = {"charge": f"ch-{charge.pk}", "effect": effect_id}
        charge.save(update_fields=["result"])
    if action == "raise-after":
        raise TimeoutError(f"{effect_id} was charged, but the reply was lost")
    if action == "hang-after":
        time.sleep(300)  # the test kills the worker meanwhile
    if action == "slow-after":
        time.sleep(0.3)
    return charge.result


def lookup(effect_id: str) -> dict:
    action = _next_action(effect_id, "lookup")
    ServiceCall.objects.create(effect_id=effect_id, call="lookup", outcome=action or "answered", pid=os.getpid())
    if action == "unknown":
        return {"status": "unknown"}
    if action == "raise":
        raise ConnectionError("the service's lookup is unavailable")
    charge = ServiceCharge.objects.filter(effect_id=effect_id).order_by("id").first()
    if charge is None:
        return {"status": "not-found"}
    return {"status": "settled", "result": charge.result}
