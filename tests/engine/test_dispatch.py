"""How durableflow sends its tasks (``durableflow.dispatch``): messages built as Celery builds
them, published with Celery's signals and the message's headers, on one warm producer per
process (the pool when it is busy), a failed one dropped and a forked child's left alone.

Publishes here go to the suite's broker, to a queue no worker consumes.
"""

from __future__ import annotations

import os
import threading

import pytest
from celery import current_app
from celery.signals import after_task_publish, before_task_publish

from durableflow import dispatch

NOBODY = "durableflow-test-nobody"


@pytest.fixture
def signalled():
    """The ``before_task_publish`` / ``after_task_publish`` calls, as (signal, task, headers, routing key)."""
    seen: list[tuple] = []

    def before(sender=None, headers=None, routing_key=None, **kwargs):
        seen.append(("before", sender, dict(headers), routing_key))

    def after(sender=None, headers=None, routing_key=None, **kwargs):
        seen.append(("after", sender, dict(headers), routing_key))

    before_task_publish.connect(before, weak=False)
    after_task_publish.connect(after, weak=False)
    yield seen
    before_task_publish.disconnect(before)
    after_task_publish.disconnect(after)


@pytest.fixture
def warm():
    """The process's warm producer, dropped before and after the test."""
    dispatch._warm.drop()
    yield dispatch._warm
    dispatch._warm.drop()


def test_a_message_is_built_without_sending_and_published_once_with_celerys_signals(signalled, warm):
    traced = {"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}
    message = dispatch.prepare(dispatch.DELIVER, ("e1",), NOBODY, traced)
    assert signalled == []
    headers, properties, body, _ = message.body
    assert (headers["task"], body[0], properties["correlation_id"]) == (dispatch.DELIVER, ("e1",), headers["id"])
    assert headers["ignore_result"] is True  # no result is kept: no subscription for one

    assert dispatch.publish(message) is True
    assert [(kind, task, key) for kind, task, _, key in signalled] == [
        ("before", dispatch.DELIVER, NOBODY),
        ("after", dispatch.DELIVER, NOBODY),
    ]
    assert signalled[0][2]["traceparent"] == traced["traceparent"]  # a tracing instrumentation sees it


def test_publishes_share_one_warm_producer_and_leave_celerys_pool_alone(warm, monkeypatch):
    assert dispatch.send(dispatch.DELIVER, ("e1",), NOBODY) is True
    producer = warm.producer

    def no_pool(*args, **kwargs):
        raise AssertionError("the pool was used")

    monkeypatch.setattr(current_app, "producer_or_acquire", no_pool)
    assert dispatch.send(dispatch.DELIVER, ("e2",), NOBODY) is True
    assert warm.producer is producer is not None


def test_a_thread_that_finds_the_warm_producer_busy_publishes_through_the_pool(warm, monkeypatch):
    pooled = []
    acquire = current_app.producer_or_acquire
    monkeypatch.setattr(current_app, "producer_or_acquire", lambda *a, **k: pooled.append(1) or acquire(*a, **k))
    with warm.lock:  # another thread's publish in progress
        sent = []
        thread = threading.Thread(target=lambda: sent.append(dispatch.send(dispatch.DELIVER, ("e1",), NOBODY)))
        thread.start()
        thread.join()
    assert (sent, pooled, warm.producer) == ([True], [1], None)


def test_a_failed_publish_is_logged_drops_the_warm_producer_and_the_next_one_connects_again(warm, monkeypatch):
    assert dispatch.send(dispatch.DELIVER, ("e1",), NOBODY) is True
    first = warm.connection
    send_task_message = current_app.amqp.send_task_message

    def refused(*args, **kwargs):
        raise ConnectionError("broker down")

    monkeypatch.setattr(current_app.amqp, "send_task_message", refused)
    assert dispatch.send(dispatch.DELIVER, ("e2",), NOBODY) is False
    assert (warm.connection, warm.producer) == (None, None)

    monkeypatch.setattr(current_app.amqp, "send_task_message", send_task_message)
    assert dispatch.send(dispatch.DELIVER, ("e3",), NOBODY) is True
    assert warm.connection is not None and warm.connection is not first


def test_a_forked_child_leaves_its_parents_warm_producer_alone(warm):
    assert dispatch.send(dispatch.DELIVER, ("e1",), NOBODY) is True
    parent_producer = warm.producer
    read, write = os.pipe()
    with warm.lock:  # held by this thread while the child is forked
        pid = os.fork()
        if pid == 0:  # pragma: no cover - the child
            ok = warm.producer is None and warm.connection is None and warm.lock.acquire(blocking=False)
            os.write(write, b"1" if ok else b"0")
            os._exit(0)
    os.close(write)
    assert os.read(read, 1) == b"1"
    os.close(read)
    os.waitpid(pid, 0)
    assert warm.producer is parent_producer
    assert dispatch.send(dispatch.DELIVER, ("e2",), NOBODY) is True


def test_on_redis_the_warm_producer_publishes_through_one_redis_client(warm):
    assert dispatch.send(dispatch.DELIVER, ("e1",), NOBODY) is True
    channel = warm.producer.channel
    if not current_app.conf.broker_url.startswith(("redis://", "rediss://")):
        pytest.skip("the broker is not Redis")
    made = []
    client = channel.Client
    channel.Client = lambda *a, **k: made.append(1) or client(*a, **k)
    try:
        for n in range(3):
            assert dispatch.send(dispatch.DELIVER, (f"e{n + 2}",), NOBODY) is True
    finally:
        channel.Client = client
    assert made == []
    with channel.conn_or_acquire() as first, channel.conn_or_acquire() as second:
        assert first is second


def test_on_other_brokers_the_warm_producers_channel_is_left_as_kombu_made_it(warm):
    assert dispatch.send(dispatch.DELIVER, ("e1",), NOBODY) is True
    if current_app.conf.broker_url.startswith(("redis://", "rediss://")):
        pytest.skip("the broker is Redis")
    assert "conn_or_acquire" not in vars(warm.producer.channel)
