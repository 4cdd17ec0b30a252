"""The embedded broker: no message lost, duplicated or read half-written; an event loop drives it."""

from __future__ import annotations

import multiprocessing
import queue as stdlib_queue
import time
import uuid

import pytest
from kombu import Connection
from kombu.asynchronous import Hub

from durableflow import transport
from durableflow.transport import FilesystemTransport

PRODUCERS, CONSUMERS, PER_PRODUCER = 3, 3, 300


def _connection(folder: str) -> Connection:
    return Connection("filesystem://", transport=FilesystemTransport, transport_options=transport.options(folder))


def _produce(folder: str, producer: int) -> None:
    with _connection(folder) as conn:
        q = conn.SimpleQueue("stress")
        for n in range(PER_PRODUCER):
            q.put({"producer": producer, "n": n, "pad": "x" * 2000})
        q.close()


def _consume(folder: str, results) -> None:
    received = []
    with _connection(folder) as conn:
        q = conn.SimpleQueue("stress")
        while True:
            try:
                message = q.get(timeout=3)
            except stdlib_queue.Empty:
                break
            received.append((message.payload["producer"], message.payload["n"], len(message.payload["pad"])))
            message.ack()
        q.close()
    results.put(received)


def test_concurrent_producers_and_consumers_see_every_message_once_and_whole(tmp_path):
    for sub in ("queue", "processed", "control"):
        (tmp_path / sub).mkdir()
    context = multiprocessing.get_context("spawn")
    results = context.Queue()
    consumers = [context.Process(target=_consume, args=(str(tmp_path), results)) for _ in range(CONSUMERS)]
    producers = [context.Process(target=_produce, args=(str(tmp_path), p)) for p in range(PRODUCERS)]
    for process in consumers + producers:
        process.start()
    received = [item for _ in consumers for item in results.get(timeout=120)]
    for process in consumers + producers:
        process.join(timeout=30)
        assert process.exitcode == 0

    assert len(received) == PRODUCERS * PER_PRODUCER
    assert set((p, n) for p, n, _ in received) == {(p, n) for p in range(PRODUCERS) for n in range(PER_PRODUCER)}
    assert {size for _, _, size in received} == {2000}
    assert list((tmp_path / "queue").iterdir()) == []


EXCHANGES = 300


def _bind(folder: str, queue: str, start) -> None:
    with _connection(folder) as conn:
        channel = conn.default_channel
        start.wait(30)
        for n in range(EXCHANGES):  # each a new exchange that the other processes bind too
            channel._queue_bind(f"shared-{n}", queue, None, queue)


def test_processes_binding_one_exchange_at_once_each_keep_their_binding(tmp_path):
    for sub in ("queue", "processed", "control"):
        (tmp_path / sub).mkdir()
    context = multiprocessing.get_context("spawn")
    start = context.Event()
    binders = [context.Process(target=_bind, args=(str(tmp_path), f"q{n}", start)) for n in range(8)]
    for process in binders:
        process.start()
    start.set()  # all at once, on an exchange none has bound yet
    for process in binders:
        process.join(timeout=60)
        assert process.exitcode == 0
    with _connection(str(tmp_path)) as conn:
        tables = [conn.default_channel.get_table(f"shared-{n}") for n in range(EXCHANGES)]
    assert [sorted(binding.queue for binding in table) for table in tables] == [[f"q{n}" for n in range(8)]] * EXCHANGES


@pytest.fixture(params=["watched", "polled"])
def looks(request, monkeypatch):
    """How a worker's loop finds new messages: woken by inotify, or looking every polling_interval."""
    if request.param == "polled":
        monkeypatch.setattr(transport, "_watch", lambda folder: None)
    else:
        # Only the watch and the wake pipe can hand a message out before the test's deadline.
        monkeypatch.setattr(transport, "WATCHED_LOOK_SECONDS", 3600)
    return request.param


def test_an_event_loop_gets_each_message_and_the_next_one_when_a_slot_frees(tmp_path, looks):
    # A queue name of its own: kombu keeps the filesystem transport's bindings per process.
    queue, hub, received = f"loop-{uuid.uuid4().hex}", Hub(), []
    try:
        with _connection(str(tmp_path)) as consumer_side, _connection(str(tmp_path)) as producer_side:
            consumer = consumer_side.Consumer(
                consumer_side.SimpleQueue(queue).queue, callbacks=[lambda body, message: received.append(message)]
            )
            consumer.qos(prefetch_count=1)
            consumer.consume()
            consumer_side.transport.register_with_event_loop(consumer_side.connection, hub)
            assert consumer_side.transport.implements.asynchronous  # a Celery worker runs its event loop

            sender = producer_side.SimpleQueue(queue)
            sender.put({"n": 1})
            sender.put({"n": 2})  # waits: the prefetch slot is taken until the first one is acked
            _run_until(hub, lambda: received)
            assert len(received) == 1
            assert len(list((tmp_path / "queue").iterdir())) == 1

            received[0].ack()  # the ack itself asks for the next look
            _run_until(hub, lambda: len(received) == 2)
            assert sorted(m.payload["n"] for m in received) == [1, 2]
            received[1].ack()
            sender.close()
            consumer.cancel()
            consumer_side.transport.unregister_from_event_loop(consumer_side.connection, hub)
    finally:
        hub.close()
    assert list((tmp_path / "queue").iterdir()) == []


def _run_until(hub: Hub, done) -> None:
    deadline = time.monotonic() + 30
    while not done():
        if time.monotonic() > deadline:
            raise AssertionError("the event loop did not hand the message out")
        hub.run_once()


@pytest.mark.parametrize("interval", [0, -1, None, "0.1", True])
def test_a_polling_interval_that_is_not_a_positive_number_is_refused(tmp_path, interval):
    message = r"polling_interval must be a number of seconds above 0, got "
    with pytest.raises(ValueError, match=message):
        transport.options(tmp_path, polling_interval=interval)
    if interval is None:
        return  # kombu reads a transport option of None as "not given": 1 s
    options = {**transport.options(tmp_path), "polling_interval": interval}
    with pytest.raises(ValueError, match=message):
        Connection("filesystem://", transport=FilesystemTransport, transport_options=options).connect()
