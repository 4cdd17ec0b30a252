"""The verbs, written once over the storage protocol.

``Engine(storage, registry, settings)`` is everything that may change an execution's state:
starting it, delivering it, steering it (cancel, retry, rerun, fork), sweeping and pruning.
The Python API (``durableflow.operations``), the Celery tasks, the admin, the REST API,
management commands and the in-memory tester all call these same methods with the storage
they use; the storages implement only ``durableflow.engine.storage.Storage``.
"""

from __future__ import annotations

import logging
import time

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

__all__ = ["Engine", "ARRIVAL_PAUSES"]

logger = logging.getLogger("durableflow.delivery")  # where the driver logs the rest of a delivery

# How long a delivery that finds no execution waits for its row, pause by pause (seconds): a
# start's INSERT was sent before its message, so the row is normally there within a
# millisecond; a second covers a slow commit.
ARRIVAL_PAUSES = (0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.3, 0.3)


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
        """One delivery: claim, replay the workflow, record the outcome; what happened, for logs.

        Where a start sends the delivery while its row commits (``storage.early_deliveries``),
        one that finds no row waits for it a little (about a second in all), then claims it.
        """
        happened = driver.run(self.journal(execution_id), self.registry, self.settings, self)
        if happened == driver.SKIPPED and self.storage.early_deliveries:
            happened = self._claim_on_arrival(execution_id)
        if happened == driver.SKIPPED:
            logger.info("delivery skipped: execution %s is not runnable, is leased or does not exist", execution_id)
        return happened

    def _claim_on_arrival(self, execution_id: str) -> str:
        """After a claim that matched nothing: wait for the row if it is not there, then claim
        again (it may also have been committed just after the first claim; a row that was there
        and is not claimable is skipped again, for one statement more)."""
        if self.storage.get_execution(execution_id, ("status",)) is None:
            logger.info("delivery early: execution %s is not written yet; waiting for its start", execution_id)
            for pause in ARRIVAL_PAUSES:
                time.sleep(pause)
                if self.storage.get_execution(execution_id, ("status",)) is not None:
                    break
            else:
                return driver.SKIPPED  # never written (a start that failed), or deleted since
        return driver.run(self.journal(execution_id), self.registry, self.settings, self)
