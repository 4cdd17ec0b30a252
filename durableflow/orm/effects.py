"""The ORM storage's effects: ``Effect`` rows and the watches of executions waiting on them.

Concurrency: each conditional write is one UPDATE whose WHERE clause carries the condition
(the effect's status, its holder, the live lease of the delivery), so two deliveries racing
for one effect cannot both match; a new effect is an INSERT that one of them wins.
"""

from __future__ import annotations

from contextlib import nullcontext
from typing import Any, Iterable

from django.db import IntegrityError, transaction
from django.db.models import Exists, F, OuterRef, Q

from durableflow.engine.effects import EffectStatus
from durableflow.engine.storage import ANY, NOW
from durableflow.models import Effect, EffectWatch

__all__ = ["OrmEffects"]


class OrmEffects:
    """Effects on the models (a part of ``OrmStorage``)."""

    def _effects(self):
        return Effect.objects.using(self.alias)

    def create_effect(self, values: dict[str, Any]) -> Effect | None:
        effect = Effect()
        for name, value in values.items():
            field = Effect._meta.get_field(name)
            if value is NOW and field.has_db_default():
                continue
            setattr(effect, field.attname, self._now() if value is NOW else value)
        # A savepoint inside a transaction keeps a taken id from breaking it.
        guard = transaction.atomic(using=self.alias) if self.connection.in_atomic_block else nullcontext()
        try:
            with guard:
                effect.save(using=self.alias, force_insert=True)
        except IntegrityError:
            return None
        return effect

    def get_effect(self, effect_id: str) -> Effect | None:
        return self._effects().filter(pk=effect_id).first()

    def update_effect(
        self,
        effect_id: str,
        values: dict[str, Any],
        *,
        statuses: Iterable[str] | None = None,
        holder_token: Any = ANY,
    ) -> int:
        rows = self._effects().filter(pk=effect_id)
        if statuses is not None:
            rows = rows.filter(status__in=list(statuses))
        if holder_token is not ANY:
            rows = rows.filter(holder_token=holder_token)
        return rows.update(**self._values(values))

    def hold_effect(self, effect_id: str, execution_id: str, token: str) -> int:
        now = self._now()
        mine = self._executions().filter(pk=execution_id, lease_token=token, lease_expires_at__gt=now)
        holder_live = self._executions().filter(
            pk=OuterRef("holder_id"), lease_token=OuterRef("holder_token"), lease_expires_at__gt=now
        )
        rows = self._effects().filter(
            Q(holder_token__isnull=True) | Q(holder_token=token) | ~Exists(holder_live),
            Exists(mine),
            pk=effect_id,
            status=EffectStatus.PENDING,
        )
        return rows.update(holder_id=execution_id, holder_token=token, attempts=F("attempts") + 1, updated_at=now)

    def add_effect_watch(self, effect_id: str, execution_id: str, step_key: str) -> None:
        EffectWatch.objects.using(self.alias).bulk_create(
            [EffectWatch(effect_id=effect_id, execution_id=execution_id, step_key=step_key)], ignore_conflicts=True
        )

    def pop_effect_watches(self, effect_id: str) -> list[str]:
        watches = EffectWatch.objects.using(self.alias)
        found = list(watches.filter(effect_id=effect_id).values_list("pk", "execution_id"))
        if not found:
            return []
        watches.filter(pk__in=[pk for pk, _ in found]).delete()
        return list(dict.fromkeys(execution_id for _, execution_id in found))
