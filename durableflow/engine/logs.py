"""Structured logs: every record of a ``durableflow.*`` logger carries ``execution_id``,
``workflow`` and ``step_key`` as attributes (None where they do not apply), for a JSON
formatter or a log pipeline to index, not only in the message text.

The values come from the scope the code runs in: a delivery sets the execution (and, once
claimed, its workflow), a step attempt its key, an item task both. They are held in a
``ContextVar``, so concurrent deliveries on threads of one process each see their own. An
``extra=`` given at the call wins over the scope. The ``ContextFilter`` is on each of
durableflow's loggers (a logger's filters do not see its children's records): modules take
theirs from ``logger(name)``.
"""

from __future__ import annotations

import contextlib
import logging
from contextvars import ContextVar
from typing import Any, Iterator

__all__ = ["FIELDS", "ContextFilter", "logger", "attach", "scope", "update", "current"]

FIELDS = ("execution_id", "workflow", "step_key")

_OUTSIDE: dict[str, Any] = {}  # the context outside every scope (never changed)
_context: ContextVar[dict[str, Any]] = ContextVar("durableflow_log_context", default=_OUTSIDE)


class ContextFilter(logging.Filter):
    """Give a record the scope's ``FIELDS`` it has not been given by ``extra=``."""

    def filter(self, record: logging.LogRecord) -> bool:
        context = _context.get()
        for name in FIELDS:
            if not hasattr(record, name):
                setattr(record, name, context.get(name))
        return True


_FILTER = ContextFilter()


def logger(name: str) -> logging.Logger:
    """The logger ``name`` (a ``durableflow.*`` one), with the ``ContextFilter``."""
    found = logging.getLogger(name)
    if _FILTER not in found.filters:
        found.addFilter(_FILTER)
    return found


def attach() -> None:
    """Put the filter on every ``durableflow`` logger made so far (those made with ``logging.getLogger``)."""
    for name in list(logging.root.manager.loggerDict):
        if name == "durableflow" or name.startswith("durableflow."):
            logger(name)


@contextlib.contextmanager
def scope(**fields: Any) -> Iterator[None]:
    """Within the block, records carry ``fields`` (over the enclosing scope's)."""
    token = _context.set({**_context.get(), **fields})
    try:
        yield
    finally:
        _context.reset(token)


def update(**fields: Any) -> None:
    """Add ``fields`` to the current scope, until it ends; outside every scope, nothing (a journal
    claimed by hand, in a test, must not name its run in the thread's later records)."""
    current = _context.get()
    if current is not _OUTSIDE:
        _context.set({**current, **fields})


def current() -> dict[str, Any]:
    """The fields of the current scope."""
    return dict(_context.get())
