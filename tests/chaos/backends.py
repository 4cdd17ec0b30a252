"""The stacks the chaos suite runs on: ``./run chaos [smoke|full] --backend redis|rabbitmq|embedded``.

The stack is read from the settings (``DATABASE_URL``, ``CELERY_BROKER_URL``), never named
twice. Each says what it offers to the scenarios that need more than workers and a database:
PostgreSQL's connections and server to break, a broker server to kill, a broker that keeps
its messages across a restart. A scenario a stack cannot offer is reported as not applicable.
"""

from __future__ import annotations

from dataclasses import dataclass

# What a scenario may need, as the report says it.
OFFERS = {
    "postgresql": "PostgreSQL (its connections, its server)",
    "broker server": "a broker server to kill",
    "durable broker": "a broker that keeps its messages across a restart",
}


@dataclass(frozen=True)
class Backend:
    name: str
    stack: str  # what the report names
    offers: frozenset[str]


BACKENDS = {
    backend.name: backend
    for backend in (
        Backend("redis", "PostgreSQL + Redis (private servers)", frozenset({"postgresql", "broker server"})),
        Backend("rabbitmq", "PostgreSQL + RabbitMQ (private servers, quorum queues)",
                frozenset({"postgresql", "broker server", "durable broker"})),  # fmt: skip
        Backend("embedded", "SQLite + filesystem:// (the embedded default)", frozenset()),
    )
}


def current() -> Backend:
    """The stack the settings name (``./run chaos`` sets them); a ``ValueError`` for any other."""
    from django.conf import settings
    from django.db import connection

    scheme = settings.CELERY_BROKER_URL.split("://", 1)[0]
    name = {("postgresql", "redis"): "redis", ("postgresql", "amqp"): "rabbitmq",
            ("sqlite", "filesystem"): "embedded"}.get((connection.vendor, scheme))  # fmt: skip
    if name is None:
        raise ValueError(
            f"the chaos suite runs on PostgreSQL + Redis, PostgreSQL + RabbitMQ or SQLite + filesystem://, "
            f"not {connection.vendor} + {scheme}://"
        )
    return BACKENDS[name]


def not_applicable(backend: Backend, need: str | None) -> str | None:
    """Why a scenario that needs ``need`` does not apply to ``backend`` (``None``: it applies)."""
    if need is None or need in backend.offers:
        return None
    return f"needs {OFFERS[need]}: {backend.stack} has none"
