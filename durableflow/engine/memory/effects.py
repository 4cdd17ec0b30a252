"""The in-memory storage's effects: ``Effect`` rows and the watches of executions waiting on them."""

from __future__ import annotations

import copy
from dataclasses import dataclass, fields
from datetime import datetime
from typing import Any, Iterable

from durableflow.engine.effects import EffectStatus
from durableflow.engine.memory.core import MemoryCore
from durableflow.engine.storage import ANY

__all__ = ["MemoryEffect", "MemoryEffects"]


@dataclass
class MemoryEffect:
    """An effect row: the attributes of the ``Effect`` model that the engine reads."""

    id: str
    operation: str
    input: Any
    input_digest: str
    status: str
    began_by: str
    began_step: str
    result: Any = None
    settled_by: str | None = None
    holder_id: str | None = None
    holder_token: str | None = None
    attempts: int = 0
    created_at: datetime | None = None
    updated_at: datetime | None = None
    settled_at: datetime | None = None


_EFFECT_FIELDS = frozenset(f.name for f in fields(MemoryEffect))


class MemoryEffects(MemoryCore):
    """Effects in memory (a part of ``InMemoryStorage``; its lock and ``atomic`` cover them)."""

    def create_effect(self, values: dict[str, Any]) -> bool:
        with self.lock:
            if values["id"] in self.tables.effects:
                return False
            effect = MemoryEffect(**{name: self._value(value) for name, value in values.items()})
            self.tables.effects[effect.id] = effect
            return True

    def get_effect(self, effect_id: str) -> MemoryEffect | None:
        with self.lock:
            return copy.deepcopy(self.tables.effects.get(effect_id))

    def update_effect(
        self,
        effect_id: str,
        values: dict[str, Any],
        *,
        statuses: Iterable[str] | None = None,
        holder_token: Any = ANY,
    ) -> int:
        with self.lock:
            effect = self.tables.effects.get(effect_id)
            if effect is None or (statuses is not None and effect.status not in set(statuses)):
                return 0
            if holder_token is not ANY and effect.holder_token != holder_token:
                return 0
            unknown = set(values) - _EFFECT_FIELDS
            if unknown:
                raise TypeError(f"unknown effect fields {sorted(unknown)}")
            for name, value in values.items():
                setattr(effect, name, self._value(value))
            return 1

    def hold_effect(self, effect_id: str, execution_id: str, token: str) -> int:
        with self.lock:
            now = self.clock()
            effect = self.tables.effects.get(effect_id)
            if effect is None or effect.status != EffectStatus.PENDING:
                return 0
            if not self._lease_live(execution_id, token, now):
                return 0
            if effect.holder_token not in (None, token) and self._lease_live(
                effect.holder_id, effect.holder_token, now
            ):
                return 0
            effect.holder_id, effect.holder_token = execution_id, token
            effect.attempts += 1
            effect.updated_at = now
            return 1

    def _lease_live(self, execution_id: str | None, token: str | None, now: datetime) -> bool:
        execution = self.tables.executions.get(execution_id or "")
        return (
            execution is not None
            and execution.lease_token == token
            and execution.lease_expires_at is not None
            and execution.lease_expires_at > now
        )

    def add_effect_watch(self, effect_id: str, execution_id: str, step_key: str) -> None:
        with self.lock:
            self.tables.effect_watches.setdefault(effect_id, {}).setdefault((execution_id, step_key), self.clock())

    def pop_effect_watches(self, effect_id: str) -> list[str]:
        with self.lock:
            watches = self.tables.effect_watches.pop(effect_id, {})
            return list(dict.fromkeys(execution_id for execution_id, _ in watches))
