"""The in-memory storage: the storage protocol in dictionaries, with a clock you move by hand.

``InMemoryStorage`` is assembled from one part per capability; it implements
``durableflow.engine.storage.Storage`` and nothing else: the verbs that run on it are the
engine's, the same the workers run on the ORM storage.
"""

from __future__ import annotations

from durableflow.engine.memory.core import ManualClock, MemoryCore, MemoryExecution, MemoryTables
from durableflow.engine.memory.stores import MemoryStores

__all__ = ["ManualClock", "MemoryExecution", "MemoryTables", "InMemoryStorage"]


class InMemoryStorage(MemoryStores, MemoryCore):
    """The storage protocol in memory (see ``durableflow.engine.memory.core`` for transactions)."""
