"""The verbs, written once over the storage protocol.

``Engine(storage, registry, settings)`` is everything that may change an execution's state:
starting it (also at a schedule's tick), delivering it, steering it (cancel, retry, rerun, fork),
sweeping and pruning; and the reads that need a decision (a stream's chunks, and whether it is done).
The Python API (``durableflow.operations``), the Celery tasks, the admin, the REST API,
management commands and the in-memory tester all call these same methods with the storage
they use; the storages implement only ``durableflow.engine.storage.Storage``.
"""

from __future__ import annotations

from durableflow.engine import driver, faults, logs, replays
from durableflow.engine.concurrency import Slots
from durableflow.engine.effects import Effects
from durableflow.engine.items import Items
from durableflow.engine.journal import Journal
from durableflow.engine.lineage import Lineage
from durableflow.engine.pruning import Pruning
from durableflow.engine.records import RELEASED
from durableflow.engine.schedules import Schedules
from durableflow.engine.settings import EngineSettings
from durableflow.engine.starts import Starts
from durableflow.engine.steering import Steering
from durableflow.engine.storage import Storage
from durableflow.engine.stores import Stores
from durableflow.engine.streams import Streams
from durableflow.engine.sweep import Sweeping
from durableflow.engine.waits import Waits
from durableflow.registry import Registry

__all__ = ["Engine"]

logger = logs.logger("durableflow.delivery")  # where the driver logs the rest of a delivery


class Engine(Starts, Steering, Lineage, Sweeping, Pruning, Effects, Stores, Streams, Waits, Items, Slots, Schedules):
    """The verbs over one storage. Cheap to build: it holds three references."""

    def __init__(self, storage: Storage, registry: Registry, settings: EngineSettings | None = None):
        self.storage = storage
        self.registry = registry
        self.settings = settings or EngineSettings()

    def journal(self, execution_id: str) -> Journal:
        """A delivery's lease on ``execution_id`` (not claimed yet), on its own guard of the
        storage (``durableflow.engine.faults``), with the verbs its steps call on the same guard."""
        guarded = faults.Guarded(self.storage)
        delivering = Engine(guarded, self.registry, self.settings)
        return Journal(
            guarded,
            execution_id,
            lease_seconds=self.settings.lease_seconds,
            engine=delivering,
            lease_holders=self.settings.lease_holders(),
            notify=self.settings.notify,
        )

    def replay_check(self, execution_id: str) -> replays.Verdict:
        """Whether the registered code replays ``execution_id``'s journal (reads only; see ``replays``)."""
        return replays.check(self.storage, self.registry, execution_id, self.settings)

    def export(self, execution_id: str) -> dict:
        """The execution's row and journal as JSON values (what ``replays.from_export`` reads)."""
        return replays.export(self.storage, execution_id)

    def deliver(self, execution_id: str) -> str:
        """One delivery: claim, replay the workflow, record the outcome; what happened, for logs.

        The database failing under it (``faults.FAULT``) ends it without an outcome: the
        connection is dropped and the lease given back (fenced by its token) if the database
        answers again, so that the delivery sent again claims it at once. One that failed before
        it claimed anything (a connection the database dropped while it was idle) is tried once
        more at once, on a new connection.
        """
        with logs.scope(execution_id=execution_id, workflow=None, step_key=None):  # the claim adds the workflow
            happened, journal = self._deliver(execution_id)
            if happened == faults.FAULT and journal.claimed is None:
                self.storage.reset()
                happened, journal = self._deliver(execution_id)
            if happened == faults.FAULT:
                self._give_back(journal)
            elif happened == driver.SKIPPED:
                logger.info(
                    "delivery skipped: execution %s is not runnable, is leased or does not exist", execution_id
                )
        return happened

    def _deliver(self, execution_id: str) -> tuple[str, Journal]:
        journal = self.journal(execution_id)
        return driver.run(journal, self.registry, self.settings, journal.engine), journal

    def _give_back(self, journal: Journal) -> None:
        """After a fault: a new connection, and the lease released if the database lets it.

        If it does not (still failing), the lease stays until it expires, or until a delivery
        finds its holder gone (``durableflow.engine.holders``).
        """
        storage = faults.unguarded(self.storage)
        storage.reset()
        if journal.claimed is None:
            return
        try:
            storage.update_execution(journal.execution_id, dict(RELEASED), token=journal.token)
        except Exception as exc:
            if not storage.is_fault(exc):
                raise
            logger.info("execution %s: its lease could not be given back (%s); it lapses", journal.execution_id, exc)
            storage.reset()


# Modules that take their logger from ``logging.getLogger``: their records carry the fields too.
logs.attach()
