"""Stream chunks: what a run hands out while it runs (``ctx.stream``, ``ctx.step.stream``)."""

from __future__ import annotations

from django.db import models

from durableflow.models.executions import Execution

__all__ = ["StreamChunk"]


class StreamChunk(models.Model):
    """Chunk ``seq`` (1, 2, ...) of one stream of one execution (``durableflow.engine.streams``)."""

    id = models.BigAutoField(primary_key=True)
    # No database-level constraint, as for StepRecord: every insert is fenced by a lookup of the
    # execution's lease, which proves it exists. Deletes (prune) cascade through the ORM.
    execution = models.ForeignKey(
        Execution, on_delete=models.CASCADE, related_name="chunks", db_index=False, db_constraint=False
    )
    stream_id = models.CharField(max_length=200)
    seq = models.PositiveIntegerField()
    chunk = models.JSONField(null=True, blank=True)
    at = models.DateTimeField()

    class Meta:
        ordering = ["id"]
        constraints = [
            # A stream never holds a chunk twice: a replay's write of a stored position conflicts.
            # The same index reads a stream from any position.
            models.UniqueConstraint(fields=["execution", "stream_id", "seq"], name="durableflow_chunk_once"),
        ]

    def __str__(self) -> str:
        return f"{self.stream_id} #{self.seq}"
