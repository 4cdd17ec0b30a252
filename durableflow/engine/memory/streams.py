"""The in-memory storage's streams: chunk rows by execution, then stream id (in seq order)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from durableflow.engine.memory.clone import clone
from durableflow.engine.memory.core import MemoryCore

__all__ = ["MemoryChunk", "MemoryStreams"]


@dataclass(frozen=True)
class MemoryChunk:
    seq: int
    chunk: Any
    at: datetime


class MemoryStreams(MemoryCore):
    """Stream chunks in memory (a part of ``InMemoryStorage``)."""

    def write_chunk(self, execution_id: str, token: str, stream_id: str, seq: int, chunk: Any, at: datetime) -> bool:
        with self.lock:
            if not self.holds_lease(execution_id, token):
                return False
            stream = self.tables.chunks.setdefault(execution_id, {}).setdefault(stream_id, {})
            if seq in stream:  # the unique (execution, stream, seq)
                return False
            stream[seq] = MemoryChunk(seq, clone(chunk), at)
            return True

    def last_chunk(self, execution_id: str, stream_id: str) -> int:
        with self.lock:
            return max(self.tables.chunks.get(execution_id, {}).get(stream_id, {}), default=0)

    def chunks(self, execution_id: str, stream_id: str, after: int, limit: int) -> list[MemoryChunk]:
        with self.lock:
            stream = self.tables.chunks.get(execution_id, {}).get(stream_id, {})
            return [clone(stream[seq]) for seq in sorted(seq for seq in stream if seq > after)[:limit]]

    def stream_ids(self, execution_id: str) -> dict[str, int]:
        with self.lock:
            return {name: max(stream) for name, stream in self.tables.chunks.get(execution_id, {}).items() if stream}
