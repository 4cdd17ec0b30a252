"""The embedded broker under concurrency: no message lost, duplicated or read half-written."""

from __future__ import annotations

import multiprocessing
import queue as stdlib_queue

from kombu import Connection

from durableflow.transport import FilesystemTransport

PRODUCERS, CONSUMERS, PER_PRODUCER = 3, 3, 300


def _connection(folder: str) -> Connection:
    options = {
        "data_folder_in": f"{folder}/queue",
        "data_folder_out": f"{folder}/queue",
        "processed_folder": f"{folder}/processed",
        "control_folder": f"{folder}/control",
        "store_processed": False,
        "polling_interval": 0.01,
    }
    return Connection("filesystem://", transport=FilesystemTransport, transport_options=options)


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
