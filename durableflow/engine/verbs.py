"""The verbs, written once over the storage protocol.

``Engine(storage, registry, settings)`` is everything that may change an execution's state:
starting it, delivering it, steering it (cancel, retry, rerun, fork), sweeping and pruning.
The Python API (``durableflow.operations``), the Celery tasks, the admin, the REST API,
management commands and the in-memory tester all call these same methods with the storage
they use; the storages implement only ``durableflow.engine.storage.Storage``.
"""

from __future__ import annotations

from durableflow.engine import driver
from durableflow.engine.effects import Effects
from durableflow.engine.items import Items
from durableflow.engine.journal import Journal
from durableflow.engine.lineage import Lineage
from durableflow.engine.pruning import Pruning
from durableflow.engine.settings import EngineSettings
from durableflow.engine.starts import Starts
from durableflow.engine.steering import Steering
from durableflow.engine.storage import Storage
from durableflow.engine.stores import Stores
from durableflow.engine.sweep import Sweeping
from durableflow.engine.waits import Waits
from durableflow.registry import Registry

__all__ = ["Engine"]


class Engine(Starts, Steering, Lineage, Sweeping, Pruning, Effects, Stores, Waits, Items):
    """The verbs over one storage. Cheap to build: it holds three references."""

    def __init__(self, storage: Storage, registry: Registry, settings: EngineSettings | None = None):
        self.storage = storage
        self.registry = registry
        self.settings = settings or EngineSettings()

    def journal(self, execution_id: str) -> Journal:
        """A delivery's lease on ``execution_id`` (not claimed yet)."""
        return Journal(self.storage, execution_id, lease_seconds=self.settings.lease_seconds, engine=self)

    def deliver(self, execution_id: str) -> str:
        """One delivery: claim, replay the workflow, record the outcome; what happened, for logs."""
        return driver.run(self.journal(execution_id), self.registry, self.settings, self)
