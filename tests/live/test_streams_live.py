"""Streams on real workers: read live over Server-Sent Events; exact after a SIGKILL mid-stream.

``t.stream`` writes 100 tokens, one every 20 ms (about two seconds), as ``ctx.step.stream``.

- An HTTP client (a real socket to a live server, ``Accept: text/event-stream``) receives the
  first chunks while the run is still running, then every chunk in order and ``done``.
- A worker's pool child is SIGKILLed while it writes the stream; the run is delivered again
  (on Redis at once, on the embedded default by the sweep) and the new delivery iterates again,
  skipping the tokens already stored: the stream ends with exactly 100 chunks, seq 1..100,
  none twice.
"""

from __future__ import annotations

import base64
import http.client
import json
import os
import signal
import time

import pytest
from django.db import connections

import durableflow
from durableflow.models import Execution, StreamChunk
from tests.apiclient import PREFIX, make_user
from tests.browser import AdminServer
from tests.helpers import uid, wait_for, wait_status
from tests.testapp.models import Marker

pytestmark = pytest.mark.integration

N = 100
PAUSE = 0.02


@pytest.fixture
def user(live_db):
    from django.contrib.auth import get_user_model

    user = make_user(get_user_model(), uid("sse"), "view_execution")
    yield user
    user.delete()


@pytest.fixture
def server(live_db):
    server = AdminServer()
    yield server
    server.stop()


def _events(response):
    """(event, id, data, monotonic time) as each event arrives on the socket."""
    fields: dict[str, str] = {}
    while True:
        line = response.readline()
        if not line:
            return
        line = line.decode().rstrip("\n")
        if not line:
            if "event" in fields:
                yield fields["event"], fields.get("id"), fields.get("data"), time.monotonic()
            fields = {}
        elif not line.startswith(":"):
            name, _, value = line.partition(": ")
            fields[name] = value


def test_an_event_stream_client_sees_chunks_before_the_run_ends(cluster, server, user):
    execution = durableflow.start("t.stream", {"n": N, "pause": PAUSE})
    host, port = server.url.removeprefix("http://").split(":")
    connection = http.client.HTTPConnection(host, int(port), timeout=30)
    credentials = base64.b64encode(f"{user.username}:pw".encode()).decode()
    connection.request(
        "GET",
        f"{PREFIX}executions/{execution.id}/streams/tokens/",
        headers={"Accept": "text/event-stream", "Authorization": f"Basic {credentials}"},
    )
    response = connection.getresponse()
    assert response.status == 200 and response.getheader("Content-Type").startswith("text/event-stream")

    seen, status_at_first = [], None
    try:
        for event, seq, data, _ in _events(response):
            if event == "done":
                break
            assert event == "chunk"
            seen.append((int(seq), json.loads(data)["chunk"]))
            if status_at_first is None:
                status_at_first = Execution.objects.values_list("status", flat=True).get(pk=execution.id)
    finally:
        connection.close()
        connections.close_all()

    assert status_at_first == "running", "the first chunk came only after the run ended"
    assert seen == [(i, f"token {i}") for i in range(1, N + 1)]
    assert wait_status(execution.id).result == N


def test_a_stream_killed_midway_ends_with_each_chunk_once(cluster, live_db):
    queue, tag = uid("stream-kill"), uid("stream-kill")
    worker = cluster.worker(queue, concurrency=2)
    try:
        execution = durableflow.start("t.stream", {"n": N, "pause": PAUSE, "tag": tag}, queue=queue)
        producer = wait_for(lambda: Marker.objects.filter(name=f"{tag}:streaming").first(), what="the stream to start")
        chunks = StreamChunk.objects.filter(execution_id=execution.id, stream_id="tokens")
        wait_for(lambda: chunks.count() >= 30, timeout=30, interval=0.01, what="30 chunks")

        os.kill(producer.pid, signal.SIGKILL)
        stored_at_kill = chunks.count()

        done = wait_status(execution.id, timeout=60)
    finally:
        cluster.stop(worker)

    assert stored_at_kill < N, "the stream had ended before the kill"
    assert done.result == N and done.deliveries >= 2
    assert Marker.objects.filter(name=f"{tag}:streaming").count() == 2  # iterated again after the kill
    rows = list(chunks.order_by("seq").values_list("seq", "chunk"))
    assert rows == [(i, f"token {i}") for i in range(1, N + 1)]
    log = list(StreamChunk.objects.filter(execution_id=execution.id, stream_id="log").values_list("seq", "chunk"))
    assert log == [(1, "started"), (2, {"tokens": N})]
