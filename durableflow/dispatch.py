"""The one way durableflow sends its Celery tasks (named in ``durableflow.engine.names``).

Tasks are sent by name on the project's own Celery app, as django-celery-beat does, so that
nothing that sends a task imports the task modules: the verbs do not import
``durableflow.tasks`` and ``durableflow.tasks`` imports the verbs. Settings, system checks and
the demo project use these names too.

A send is two halves, which a start inside the caller's transaction takes apart:

- ``prepare``: the message, built as Celery's ``send_task`` builds it (the routers, the task
  message of protocol 2, a new task id) with nothing sent. A start inside a transaction builds
  its delivery while the transaction is open (``durableflow.orm.core``);
- ``publish``: the message sent with Celery's ``send_task_message`` (so ``before_task_publish``
  and ``after_task_publish`` fire, with the message's headers: the guard below, a tracing
  instrumentation) under a bounded retry policy. Once the caller's transaction has committed,
  all that is left on its path is this publish, on the process's *warm producer*: one
  producer kept on its own broker connection (``connection_for_write``), so that a publish
  neither takes a producer from Celery's pool nor binds it to a channel again (on Redis, its
  channel keeps one Redis client too). A thread that finds it busy publishes through the pool,
  as Celery does.

``send`` is both at once. What ``send_task`` does that these leave out: countdowns and ETAs,
expiry, links and chords, results (durableflow's tasks keep none) and the parent task's trail.

The warm producer is one per process: it is forgotten in a forked child (whose parent owns its
socket) and dropped after a publish that failed (the next one connects again).
"""

from __future__ import annotations

import atexit
import os
import threading
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass
from typing import Any

from durableflow.engine import logs, transactions
from durableflow.engine.names import DELIVER, PRUNE, RUN_ITEM, SWEEP, TASKS, TICK

__all__ = [
    "DELIVER",
    "SWEEP",
    "RUN_ITEM",
    "PRUNE",
    "TICK",
    "TASKS",
    "Message",
    "prepare",
    "publish",
    "send",
    "send_many",
    "guard_publishes",
]

logger = logs.logger("durableflow.dispatch")

# A publish never blocks its caller for long: one bounded retry. A message that cannot be
# sent is not lost work (the row is committed); the sweep sends it again once overdue.
_RETRY_POLICY = {"max_retries": 1, "interval_start": 0, "interval_step": 0.2, "interval_max": 0.2}


@dataclass(eq=False)
class Message:
    """A task message built by ``prepare`` and not sent yet (``publish`` sends it once)."""

    task: str
    args: tuple
    queue: str
    body: Any  # Celery's task message: headers, properties, body, sent event
    options: dict[str, Any]  # the routed publish options: queue, exchange, routing key, retry, headers


def prepare(task: str, args: tuple, queue: str, headers: dict[str, str] | None = None) -> Message | None:
    """``task(*args)`` for ``queue`` as a message, sending nothing; ``None`` if it could not be
    built (logged, never raised: the sweep sends the work again).

    ``headers``: message headers on top of Celery's (a span context: ``durableflow.engine.tracing``).
    """
    try:
        return _build(task, args, queue, headers)
    except Exception:
        logger.warning(
            "could not build %s%r for queue %s; the sweep will resend it",
            task,
            args,
            queue,
            exc_info=True,
            extra=_named(task, args),
        )
        return None


def _build(task: str, args: tuple, queue: str, headers: dict[str, str] | None) -> Message:
    from celery import current_app as app
    from kombu.utils.uuid import uuid

    # No result is kept, and the message says so: else a sender whose project has a result
    # backend would subscribe to each task's result (Redis pub/sub) for the life of the process.
    options: dict[str, Any] = {"queue": queue, "retry": True, "retry_policy": _RETRY_POLICY}
    if headers is not None:
        options["headers"] = headers
    options = app.amqp.router.route(options, task, args, {}, None)
    parent = app.current_worker_task  # a start from a task: Celery's lineage in the headers
    root_id = parent_id = None
    if parent is not None:
        root_id, parent_id = parent.request.root_id or parent.request.id, parent.request.id
    body = app.amqp.create_task_message(
        uuid(),
        task,
        args,
        {},
        root_id=root_id,
        parent_id=parent_id,
        reply_to=app.thread_oid,
        create_sent_event=app.conf.task_send_sent_event,
        ignore_result=True,
        **options,
    )
    return Message(task, tuple(args), queue, body, options)


def publish(message: Message) -> bool:
    """Send a prepared message; never raise, never hang for long (``False``: not sent, the
    sweep sends the work again). Inside a transactional step's body it refuses instead
    (``TRANSACTION_FORBIDDEN_CALL``)."""
    _refuse_inside_transaction(message.task)
    from celery.app import app_or_default

    # The app itself, not the current_app proxy (one object whatever app it stands for): the warm
    # producer belongs to one app, and is made again for another.
    app = app_or_default()
    try:
        if _warm.lock.acquire(blocking=False):
            try:
                _warm.publish(app, message)
            finally:
                _warm.lock.release()
        else:
            with app.producer_or_acquire() as producer:
                app.amqp.send_task_message(producer, message.task, message.body, **message.options)
    except Exception:
        logger.warning(
            "could not send %s%r to queue %s; the sweep will resend it",
            message.task,
            message.args,
            message.queue,
            exc_info=True,
            extra=_named(message.task, message.args),
        )
        return False
    return True


def send(task: str, args: tuple, queue: str, headers: dict[str, str] | None = None) -> bool:
    """Send ``task(*args)`` to ``queue`` (``prepare``, then ``publish``); never raise, never hang
    for long. ``headers``: as ``prepare``'s. Inside a transactional step's body it refuses
    instead (``TRANSACTION_FORBIDDEN_CALL``)."""
    _refuse_inside_transaction(task)
    message = prepare(task, args, queue, headers)
    return message is not None and publish(message)


def _named(task: str, args: tuple) -> dict[str, Any]:
    """What a log record of a message names (sent after a commit: no delivery's scope to name it)."""
    named = {"execution_id": args[0]} if task in (DELIVER, RUN_ITEM) else {}
    if task == RUN_ITEM:
        named["step_key"] = args[1]
    return named


def send_many(task: str, args_list: list[tuple], queue: str, headers: dict[str, str] | None = None) -> bool:
    """Send ``task(*args)`` for each of ``args_list`` through one producer (one broker
    connection from Celery's pool, its publishes batched where kombu can: one Redis pipeline);
    never raise. After the first failure the rest are left to the sweep rather than each
    waiting out its own retry. ``headers``: as ``send``'s, on each message."""
    _refuse_inside_transaction(task)
    from celery import current_app as app

    try:
        with app.producer_or_acquire() as producer, _batch(producer):
            for args in args_list:
                message = _build(task, args, queue, headers)
                app.amqp.send_task_message(producer, task, message.body, **message.options)
    except Exception:
        logger.warning(
            "could not send all %d %s messages to queue %s; the sweep will resend those lost",
            len(args_list),
            task,
            queue,
            exc_info=True,
        )
        return False
    return True


def _batch(producer: Any) -> AbstractContextManager[Any]:
    batch = getattr(producer, "batch", None)  # kombu >= 5.7
    return batch() if batch is not None else nullcontext()


class _WarmProducer:
    """The process's producer on its own broker connection, used by one thread at a time
    (``lock``, taken without waiting: a thread that finds it busy uses Celery's pool)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.app: Any = None
        self.connection: Any = None
        self.producer: Any = None

    def publish(self, app: Any, message: Message) -> None:
        if self.producer is None or self.app is not app:
            self.drop()
            self.connection, self.app = app.connection_for_write(), app
            # Binding connects (within broker_connection_timeout); a failure drops it below.
        try:
            if self.producer is None:
                self.producer = app.amqp.Producer(self.connection)
                _one_redis_client(self.producer.channel)
            app.amqp.send_task_message(self.producer, message.task, message.body, **message.options)
        except BaseException:
            self.drop()  # the retry policy could not save it: connect afresh next time
            raise

    def drop(self) -> None:
        """Close the connection without waiting on the broker (it may be why we drop it)."""
        connection, self.connection, self.producer, self.app = self.connection, None, None, None
        if connection is not None:
            try:
                connection.collect(socket_timeout=0.1)
            except Exception:  # noqa: BLE001 - a connection already broken
                pass

    def forget(self) -> None:
        """In a forked child: the connection is the parent's, never to be used or closed here."""
        self.lock = threading.Lock()
        self.app = self.connection = self.producer = None


def _one_redis_client(channel: Any) -> None:
    """On kombu's Redis transport, let the warm producer's channel publish through one Redis
    client: kombu makes a new one (on the same connection pool) for every publish, which costs
    more than the publish's round trip. Other transports are left as they are."""
    if type(channel).__module__ != "kombu.transport.redis":  # not imported: redis-py may be absent
        return
    pool = channel.pool
    credentials = pool.connection_kwargs.get("credential_provider")
    client = channel.Client(connection_pool=pool, **({"credential_provider": credentials} if credentials else {}))

    @contextmanager
    def conn_or_acquire(client_: Any = None) -> Iterator[Any]:
        yield client_ or client

    channel.conn_or_acquire = conn_or_acquire


_warm = _WarmProducer()
os.register_at_fork(after_in_child=_warm.forget)
atexit.register(_warm.drop)


def guard_publishes() -> None:
    """Refuse Celery publishes from transactional step bodies (connected once, at app start)."""
    from celery.signals import before_task_publish

    before_task_publish.connect(_before_publish, weak=False, dispatch_uid="durableflow.refuse-in-transactions")


def _before_publish(sender: str | None = None, **kwargs: Any) -> None:
    # Raises a BaseException: Celery logs and drops a receiver's Exception, and the publish
    # must not happen.
    _refuse_inside_transaction(sender or "?")


def _refuse_inside_transaction(task: str) -> None:
    transactions.refuse(
        code="TRANSACTION_FORBIDDEN_CALL",
        message=f"its body sent the Celery task {task!r}; a message cannot be taken back if the transaction "
        "rolls back, and would be sent again when it runs again. Send it once the step has committed "
        "(transaction.on_commit, task.delay_on_commit) or from a ctx.step.run step.",
    )
