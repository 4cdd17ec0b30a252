"""Pruning: deleting finished executions, with their journals, once they are old enough."""

from __future__ import annotations

import logging
from datetime import timedelta
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from durableflow.engine.verbs import Engine

__all__ = ["Pruning"]

logger = logging.getLogger("durableflow")


class Pruning:
    """The ``prune`` verb (a mixin of ``Engine``)."""

    def prune(self: Engine, older_than: timedelta, *, batch: int = 1000) -> int:
        """Delete the executions that finished more than ``older_than`` ago, in batches of
        ``batch`` (one transaction each), with their journals, waiters, signals and watches;
        return how many went.

        Kept: anything unfinished, a finished execution that an unfinished one waits for (its
        outcome is read when the waiter replays), the stores' ledgers (their history) and
        published events (a long wait may still take an old one). A run that is retried while
        a prune runs is not deleted: each batch deletes only rows still finished, locked first.

        Rate-limit admissions outlive their execution until they leave their window (a limiter
        must go on counting them): each prune then deletes those of executions finished or gone,
        whatever ``older_than``, and the requests such executions never had admitted.
        """
        if older_than < timedelta(0):
            raise ValueError(f"older_than must not be negative; got {older_than}")
        if batch < 1:
            raise ValueError(f"batch must be at least 1; got {batch}")
        storage = self.storage
        before = storage.now() - older_than
        deleted = 0
        while True:
            ids = storage.prunable(before, batch)
            if not ids:
                break
            with storage.atomic():
                gone = storage.delete_finished(ids)
            deleted += gone
            if gone == 0:  # all of them changed meanwhile (retried): the next prune looks again
                break
        if deleted:
            logger.info("prune: %d executions that finished before %s deleted", deleted, before.isoformat())
        while storage.drop_spent_admissions(batch) == batch:
            pass
        return deleted
