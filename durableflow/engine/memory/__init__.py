"""The in-memory storage: the storage protocol in dictionaries, with a clock you move by hand.

``InMemoryStorage`` is assembled from one part per capability; it implements
``durableflow.engine.storage.Storage`` and nothing else: the verbs that run on it are the
engine's, the same the workers run on the ORM storage.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from durableflow.engine.memory.core import ManualClock, MemoryCore, MemoryExecution, MemoryTables
from durableflow.engine.memory.effects import MemoryEffect, MemoryEffects
from durableflow.engine.memory.items import MemoryItems
from durableflow.engine.memory.ratelimits import MemoryAdmission, MemoryRateLimits
from durableflow.engine.memory.sagas import MemorySagas
from durableflow.engine.memory.slots import MemorySlots
from durableflow.engine.memory.stores import MemoryStores
from durableflow.engine.memory.streams import MemoryStreams
from durableflow.engine.memory.transactions import MemoryTable, MemoryTransactions
from durableflow.engine.memory.waits import MemoryWaits
from durableflow.engine.storage import Storage

__all__ = [
    "ManualClock",
    "MemoryExecution",
    "MemoryEffect",
    "MemoryAdmission",
    "MemoryTables",
    "MemoryTable",
    "InMemoryStorage",
]


class InMemoryStorage(
    MemoryRateLimits,
    MemorySlots,
    MemorySagas,
    MemoryEffects,
    MemoryStores,
    MemoryStreams,
    MemoryWaits,
    MemoryItems,
    MemoryTransactions,
    MemoryCore,
):
    """The storage protocol in memory (see ``durableflow.engine.memory.core`` for transactions)."""


if TYPE_CHECKING:

    def _implements(storage: InMemoryStorage) -> Storage:
        return storage  # the type checker holds InMemoryStorage to the protocol here
