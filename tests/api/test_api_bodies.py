"""Adversarial request bodies: each about the API's largest (1 MB) and each answered with a
coded 4xx in less than twice the time of a plain body of that size, which is accepted; and
while one is parsed, a GET to the same server is not held up.

Times are ratios to the plain body measured in the same test (the best of a few runs of
each), never wall-clock budgets. DRF's session authentication parses a body during its CSRF
check, before any permission is checked, so any logged-in user can send these.
"""

from __future__ import annotations

import base64
import json
import threading
import time
from typing import Callable

import pytest

from durableflow.api.parsers import body_limit
from tests.apiclient import Api, error, make_user
from tests.helpers import uid

MB = 1_000_000
BUDGET = 2.0  # a hostile body costs less than this many plain bodies of its size
RUNS = 3


def _start(params_json: str) -> str:
    return '{"workflow": "t.steps", "params": ' + params_json + "}"


def _fill(unit: str, size: int = MB) -> str:
    return unit * (size // len(unit))


def plain_body() -> str:
    """An ordinary 1 MB start: records of numbers, strings and short lists (accepted)."""
    items = [{"id": i, "name": f"item {i}", "tags": ["a", "b"], "price": i * 1.5} for i in range(13_500)]
    return _start(json.dumps({"items": items}))


# name -> (body, the code it is refused with)
HOSTILE: dict[str, tuple[Callable[[], str], str]] = {
    # The pre-scan that was quadratic: brackets, then a string that never ends, full of \" escapes.
    "600 [ then an unterminated string of \\\"": (lambda: "[" * 600 + '"' + _fill('\\"'), "INVALID_JSON"),
    "an unterminated string of \\\" in params": (lambda: _start('"' + _fill('\\"')), "INVALID_JSON"),
    "1 MB of [": (lambda: _fill("["), "INVALID_JSON"),
    "balanced 500,000 deep": (lambda: "[" * (MB // 2) + "]" * (MB // 2), "INVALID_JSON"),
    "objects 200,000 deep in params": (lambda: _start(_fill('{"a":', MB - 100)), "INVALID_JSON"),
    "params 513 deep after 1 MB of siblings": (
        lambda: _start("[" + _fill("[1],", MB - 2000) + "[" * 513 + "]" * 514),
        "INVALID_PARAMS",
    ),
    "1 MB of empty lists, then NaN": (lambda: _start("[" + _fill("[],", MB - 100) + "NaN]"), "INVALID_JSON"),
    "1 MB of empty lists, then a NUL": (lambda: _start("[" + _fill("[],", MB - 100) + '"\\u0000"]'), "INVALID_PARAMS"),
    "brackets inside a string, then Infinity": (
        lambda: _start('["' + _fill("[{", MB - 100) + '", Infinity]'),
        "INVALID_JSON",
    ),
    "\\\" escapes, then a NUL": (lambda: _start('"' + _fill('\\"', MB - 100) + '\\u0000"'), "INVALID_PARAMS"),
    "emoji escapes, then a lone surrogate": (
        lambda: _start('"' + _fill("\\ud83d\\ude00", MB - 100) + '\\ud800"'),
        "INVALID_PARAMS",
    ),
    "integers of 4,300 digits": (lambda: _start("[" + ",".join(["9" * 4300] * 230) + "]"), "INVALID_PARAMS"),
    "an integer of 5,000 digits": (lambda: _start(" " * (MB - 5100) + "9" * 5000), "INVALID_JSON"),
    "a float of a million digits": (lambda: _start("9" * (MB - 100) + ".5"), "INVALID_PARAMS"),
    "an exponent of a million digits": (lambda: _start("1e" + "9" * (MB - 100)), "INVALID_PARAMS"),
    "1 MB of whitespace, then garbage": (lambda: _start(" " * (MB - 100) + "@"), "INVALID_JSON"),
    "a repeated member": (lambda: "{" + _fill('"params": 1, ', MB - 100) + '"workflow": 7}', "INVALID_REQUEST"),
    "80,000 unknown members": (lambda: "{" + ",".join(f'"k{i}": 1' for i in range(80_000)) + "}", "INVALID_REQUEST"),
    "an unknown member of 1 MB": (lambda: '{"' + "k" * (MB - 100) + '": 1}', "INVALID_REQUEST"),
    "a workflow name of 1 MB": (lambda: '{"workflow": "' + "w" * (MB - 100) + '"}', "UNKNOWN_WORKFLOW"),
    "an execution id of 1 MB": (
        lambda: '{"workflow": "t.steps", "execution_id": "' + "i" * (MB - 100) + '"}',
        "INVALID_PARAMS",
    ),
    "invalid UTF-8 at the end": (lambda: _start('"' + "x" * (MB - 100) + '\udcff"'), "INVALID_JSON"),
    "a byte order mark": (lambda: "\ufeff" + plain_body()[: MB - 100], "INVALID_JSON"),
}


def _post(client, body: bytes):
    return Api(client).post("executions/", raw=body)


def _timed(client, body: bytes) -> tuple[float, object]:
    began = time.perf_counter()
    response = _post(client, body)
    return time.perf_counter() - began, response


def _best_of_each(client, *bodies: bytes) -> list[tuple[float, object]]:
    """The best time (and an answer) of each body, taken in turns so that a busy machine slows all alike."""
    best: list[tuple[float, object]] = [(float("inf"), None)] * len(bodies)
    for _ in range(RUNS):
        for i, body in enumerate(bodies):
            seconds, response = _timed(client, body)
            best[i] = (min(best[i][0], seconds), response)
    return best


def _encoded(text: str) -> bytes:
    return text.encode("utf-8", "surrogateescape")  # \udcff: a lone 0xFF byte, not UTF-8


@pytest.fixture
def starter(db, client, django_user_model, no_send):
    """A logged-in user who may start executions, by session (the CSRF check parses the body)."""
    client.force_login(make_user(django_user_model, "starter", "add_execution", "view_execution"))
    return client


@pytest.mark.parametrize("name", list(HOSTILE))
def test_a_hostile_body_is_refused_with_a_code_in_less_than_twice_a_plain_one(starter, name):
    build, code = HOSTILE[name]
    body, plain = _encoded(build()), _encoded(plain_body())
    assert 0.9 * MB < len(body) <= body_limit(), len(body)
    assert 0.95 * MB < len(plain) <= MB

    (seconds, response), (plain_seconds, accepted) = _best_of_each(starter, body, plain)

    assert accepted.status_code == 201, accepted.content[:300]
    body_json = error(response, response.status_code, code)
    assert 400 <= response.status_code < 500
    assert len(response.content) < 4096, f"{len(response.content)} bytes of error for a {len(body)} byte body"
    assert body_json["message"]
    assert seconds < BUDGET * plain_seconds, f"{seconds * 1000:.0f} ms against {plain_seconds * 1000:.0f} ms plain"


# A parallel GET, on a real server ------------------------------------------------------------


@pytest.fixture
def live_user(live_db):
    """A committed user (the server's threads cannot see a test transaction's rows)."""
    from django.contrib.auth import get_user_model

    user = make_user(get_user_model(), uid("bodies"), "add_execution", "view_execution")
    yield user
    user.delete()


@pytest.fixture
def server(live_db):
    from tests.browser import AdminServer

    server = AdminServer()
    yield server
    server.stop()


def _request(server, user, method: str, path: str, body: bytes | None = None) -> tuple[float, int]:
    import urllib.error
    import urllib.request

    credentials = base64.b64encode(f"{user.username}:pw".encode()).decode()
    request = urllib.request.Request(
        f"{server.url}/api/durableflow/{path}",
        data=body,
        method=method,
        headers={"Authorization": f"Basic {credentials}", "Content-Type": "application/json"},
    )
    began = time.perf_counter()
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            response.read()
            status = response.status
    except urllib.error.HTTPError as refused:
        refused.read()
        status = refused.code
    return time.perf_counter() - began, status


def _gets_during(server, user, bodies: list[bytes], expect: set[int]) -> list[float]:
    """GET latencies while another client posts ``bodies`` over and over."""
    stop, statuses = threading.Event(), set()

    def post_all() -> None:
        while not stop.is_set():
            for body in bodies:
                statuses.add(_request(server, user, "POST", "executions/", body)[1])

    poster = threading.Thread(target=post_all, daemon=True)
    poster.start()
    try:
        latencies = []
        for _ in range(30):
            seconds, status = _request(server, user, "GET", "executions/?page_size=1")
            assert status == 200
            latencies.append(seconds)
    finally:
        stop.set()
        poster.join(timeout=120)
    assert statuses == expect, statuses
    return sorted(latencies)


def test_a_get_is_not_held_up_by_hostile_bodies_any_more_than_by_plain_ones(server, live_user, no_send):
    from durableflow.models import Execution

    hostile = [_encoded(HOSTILE[name][0]()) for name in list(HOSTILE)[:5]]
    plain = [_encoded(plain_body())]
    before = set(Execution.objects.values_list("pk", flat=True))
    try:
        during_plain = _gets_during(server, live_user, plain, {201})
        during_hostile = _gets_during(server, live_user, hostile, {400})
    finally:
        Execution.objects.exclude(pk__in=before).filter(workflow="t.steps").delete()

    median_plain, median_hostile = during_plain[len(during_plain) // 2], during_hostile[len(during_hostile) // 2]
    assert median_hostile < BUDGET * median_plain, (median_hostile, median_plain)
    assert during_hostile[-1] < BUDGET * during_plain[-1], (during_hostile[-1], during_plain[-1])
