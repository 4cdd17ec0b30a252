"""Concurrency keys: at most ``limit`` executions of a workflow with one key past their start.

``@workflow(concurrency=Concurrency(key="params.customer", limit=1))``. A start computes the
run's key; with ``limit`` runs of that key unfinished already, the new one is queued: it stays
``pending`` with ``waiting_for == {"kind": "concurrency", "key": ..., "position": ...}`` and
``concurrency_queued`` set, which no claim and no sweep re-send takes, so no worker holds it.
A slot is nothing stored: the holders are the key's unfinished runs that are not queued. When
one ends (an outcome, a cancel), the transaction that ends it admits the oldest queued runs
into the slots it frees, and their deliveries leave once it commits. A holder whose lease
expired is still unfinished, so it keeps its slot until the sweep's delivery resumes or ends
it: no two runs ever hold one slot. ``continue_as_new`` hands the slot to the run it starts.
The sweep admits too, for a key whose slots were freed another way (a run deleted, the limit
raised by a deploy).

Every decision about a key is taken under ``storage.lock_slots(workflow, key)``, held until
its transaction ends, so two starts (or a start and an ending holder) never both take the
last slot.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from durableflow import exceptions, values
from durableflow.engine import names
from durableflow.engine.states import QUEUED
from durableflow.engine.storage import NOW

if TYPE_CHECKING:
    from durableflow.engine.verbs import Engine
    from durableflow.options import Concurrency

__all__ = ["QUEUED_KIND", "MAX_KEY_LENGTH", "key_for", "Slots"]

QUEUED_KIND = "concurrency"  # waiting_for["kind"] of a run queued for a slot
MAX_KEY_LENGTH = 255
_ADMITTED = {"concurrency_ticket": None, "waiting_for": None, "enqueued_at": NOW}


def key_for(concurrency: Concurrency | None, params: Any) -> str | None:
    """The concurrency key of a run with ``params`` (None: not limited); ``INVALID_PARAMS`` if
    the key cannot be computed or is not a string, a number or a boolean of at most 255
    characters."""
    if concurrency is None:
        return None
    try:
        found = concurrency.evaluate(params)
    except Exception as exc:  # noqa: BLE001 - a user's key function: any error is a refused start
        raise exceptions.WorkflowStartError(
            "INVALID_PARAMS", f"the workflow's concurrency key could not be computed from the params: {exc}"
        ) from None
    if found is None:
        return None
    if isinstance(found, str):
        key = found
    elif isinstance(found, (bool, int, float)):
        key = values.encode(found)
    else:
        raise exceptions.WorkflowStartError(
            "INVALID_PARAMS",
            f"the workflow's concurrency key is a {type(found).__name__}: it must be a string, a number, "
            "a boolean or None (not limited)",
        )
    if not key or len(key) > MAX_KEY_LENGTH:
        raise exceptions.WorkflowStartError(
            "INVALID_PARAMS",
            f"the workflow's concurrency key must be 1 to {MAX_KEY_LENGTH} characters long, not {len(key)}",
        )
    return key


class Slots:
    """Concurrency keys' slots (a mixin of ``Engine``)."""

    def limited(self: Engine, workflow: str) -> bool:
        """Whether runs of ``workflow`` may hold slots (one not registered here may have)."""
        definition = self.registry.get(workflow)
        return definition is None or definition.concurrency is not None

    def _limit(self: Engine, workflow: str) -> int | None:
        definition = self.registry.get(workflow)
        concurrency = definition.concurrency if definition is not None else None
        return concurrency.limit if concurrency is not None else None

    def take_slot(self: Engine, workflow: str, key: str, limit: int, fields: dict[str, Any]) -> bool:
        """For a run of ``key`` about to start (or start again), in its transaction: lock the
        key; whether a slot is free. If none is, ``fields`` (the run's write) queue it."""
        self.storage.lock_slots(workflow, key)
        holders, queued, last = self.storage.slots(workflow, key)
        if queued and holders < limit:  # slots freed without admitting (the sweep would): first in, first
            self.free_slots(workflow, key)
            holders, queued, last = self.storage.slots(workflow, key)
        if holders < limit and not queued:
            return True
        fields["concurrency_ticket"] = last + 1
        fields["waiting_for"] = {"kind": QUEUED_KIND, "key": key, "position": queued + 1}
        return False

    def free_slots(self: Engine, workflow: str, key: str | None) -> int:
        """Admit the first queued runs of ``key`` into its free slots, in the current
        transaction (their deliveries leave when it commits); how many were admitted."""
        if key is None:
            return 0
        self.storage.lock_slots(workflow, key)
        holders, queued, _ = self.storage.slots(workflow, key)
        limit = self._limit(workflow)
        free = queued if limit is None else min(limit - holders, queued)  # no limit now (a deploy): all
        if free <= 0:
            return 0
        first = self.storage.queued_runs(workflow, key, free)
        admitted = self.storage.update_executions([pk for pk, _ in first], dict(_ADMITTED), statuses=QUEUED)
        for pk, queue in admitted:
            self.storage.enqueue(names.DELIVER, (pk,), queue)
        return len(admitted)

    def sweep_slots(self: Engine, limit: int) -> int:
        """Admit queued runs wherever their key has a slot free (the sweep's part): how many."""
        admitted = 0
        for workflow, key in self.storage.queued_keys(limit):
            with self.storage.atomic():
                admitted += self.free_slots(workflow, key)
        return admitted
