"""OpenTelemetry: a span per start, delivery and live step attempt, in one trace, through both
storages (``backend``); nothing at all without a tracer provider, and nothing imported
without the package.

The spans go to the SDK's in-memory exporter through ``tracing.override`` (the global
provider of a process can be set only once; this process's stays unset).
"""

from __future__ import annotations

import contextlib
import subprocess
import sys

import pytest

import durableflow
from durableflow import RetryableError
from durableflow.engine import tracing
from tests.cluster import ROOT

pytest.importorskip("opentelemetry.sdk.trace")

from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode

calls: dict[str, int] = {}


def _flaky(tag: str) -> str:
    calls[tag] = calls.get(tag, 0) + 1
    if calls[tag] == 1:
        raise RetryableError("not yet", max_attempts=2, retry_interval=1.0)
    return "ok"


def _broken() -> None:
    raise ValueError("no luck")


@durableflow.workflow("tracing.three")
def three(ctx, params):
    ctx.step.run("first", lambda: 1)
    ctx.step.run("second", _flaky, params["tag"])
    return ctx.step.run("third", lambda: 3)


@durableflow.workflow("tracing.broken")
def broken(ctx, params):
    return ctx.step.run("broken", _broken)


def _ready_on_second_look(tag: str) -> str | None:
    calls[tag] = calls.get(tag, 0) + 1
    if calls[tag] == 1:
        raise RetryableError("not yet")  # a poll's "not yet", as a falsy answer is
    return "ready"


@durableflow.workflow("tracing.kinds")
def kinds(ctx, params):
    ready = ctx.step.poll("ready", lambda: _ready_on_second_look(params["tag"]), interval=0, max_attempts=3)
    return ctx.step.transaction("book", lambda: ready)


@pytest.fixture
def spans():
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    with tracing.override(provider):
        yield exporter
    provider.shutdown()


def _printed(script: str) -> str:
    """What ``script`` prints, run in a new interpreter (it must succeed)."""
    found = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True)
    assert found.returncode == 0, found.stderr
    return found.stdout


def _by_name(finished, prefix):
    return [span for span in finished if span.name.startswith(prefix)]


def test_a_run_with_a_retry_is_one_trace_of_its_start_deliveries_and_step_attempts(backend, spans):
    tag = f"trace-{backend.name}"
    with tracing.tracer().start_as_current_span("request") as request:
        execution_id = backend.start("tracing.three", {"tag": tag})
    assert backend.run(execution_id).status == "completed"

    finished = spans.get_finished_spans()
    (start,) = _by_name(finished, "durableflow.start")
    deliveries = _by_name(finished, "durableflow.delivery")
    steps = _by_name(finished, "durableflow.step")
    assert {span.context.trace_id for span in finished} == {request.get_span_context().trace_id}
    assert start.parent.span_id == request.get_span_context().span_id
    assert start.name == "durableflow.start tracing.three"
    assert start.attributes["durableflow.execution_id"] == execution_id
    # The retry waits a second: the second delivery is sent by the sweep, not by the first;
    # both are children of the start all the same (its context is on the row).
    assert len(deliveries) == backend.get(execution_id).deliveries == 2
    assert {span.parent.span_id for span in deliveries} == {start.context.span_id}
    assert [span.attributes["durableflow.outcome"] for span in deliveries] == ["suspended", "completed"]
    assert [span.attributes["durableflow.delivery"] for span in deliveries] == [1, 2]
    assert [(s.attributes["durableflow.step_key"], s.attributes["durableflow.attempt"]) for s in steps] == [
        ("first", 1),
        ("second", 1),
        ("second", 2),
        ("third", 1),
    ]
    first, second = deliveries
    assert [s.parent.span_id for s in steps] == [first.context.span_id] * 2 + [second.context.span_id] * 2
    assert steps[0].attributes == {
        "durableflow.execution_id": execution_id,
        "durableflow.workflow": "tracing.three",
        "durableflow.version": "1",
        "durableflow.step_key": "first",
        "durableflow.step_kind": "run",
        "durableflow.attempt": 1,
    }
    failed = steps[1]
    assert failed.status.status_code == StatusCode.ERROR
    assert failed.status.description == "RetryableError: RETRYABLE: not yet"
    (event,) = failed.events
    assert event.name == "exception" and event.attributes["exception.message"] == "RETRYABLE: not yet"
    assert all(span.status.status_code == StatusCode.UNSET for span in steps if span is not failed)


def test_a_failed_run_marks_its_delivery_with_the_recorded_error(backend, spans):
    execution_id = backend.start("tracing.broken")
    assert backend.run(execution_id).status == "failed"

    (delivery,) = _by_name(spans.get_finished_spans(), "durableflow.delivery")
    assert delivery.attributes["durableflow.outcome"] == "failed"
    assert delivery.status.status_code == StatusCode.ERROR
    assert delivery.status.description == "ValueError: no luck"
    (event,) = delivery.events
    assert event.attributes["exception.type"] == "builtins.ValueError"
    assert "Traceback" in event.attributes["exception.stacktrace"]
    (start,) = _by_name(spans.get_finished_spans(), "durableflow.start")
    assert start.parent is None  # nothing was current: the start is the trace's root


def test_a_delivery_that_claims_nothing_makes_no_span(backend, spans):
    execution_id = backend.start("tracing.broken")
    backend.run(execution_id)
    spans.clear()
    assert backend.deliver(execution_id) == "skipped"
    assert spans.get_finished_spans() == ()


def test_without_a_provider_nothing_is_traced_or_stored(backend):
    assert tracing.tracer() is None  # this process never sets a global provider
    execution_id = backend.start("tracing.broken")
    backend.run(execution_id)
    assert tracing.carrier() is None
    assert backend.storage.get_execution(execution_id, ("trace_context",)).trace_context is None


def test_the_engine_runs_without_the_opentelemetry_package():
    # The package made unimportable (None in sys.modules): a run in memory works, and tracing
    # says it is off.
    script = (
        "import sys; sys.modules['opentelemetry'] = None\n"
        "import durableflow\n"
        "from durableflow.engine import tracing\n"
        "from durableflow.testing import WorkflowTester\n"
        "@durableflow.workflow('t.untraced')\n"
        "def untraced(ctx, params):\n"
        "    return ctx.step.run('one', lambda: 1)\n"
        "tester = WorkflowTester()\n"
        "result = tester.run_until_finished(tester.start('t.untraced').id)\n"
        "print(result, tracing.tracer(), tracing.carrier(), 'opentelemetry.trace' in sys.modules)\n"
    )
    assert _printed(script).split() == ["1", "None", "None", "False"]


def test_a_delivery_sent_from_another_span_is_the_starts_child_linked_to_its_sender(backend, spans):
    execution_id = backend.start("tracing.broken")
    with tracing.tracer().start_as_current_span("POST /events/") as sender:
        backend.deliver(execution_id)  # as if woken by an event a request sent

    finished = spans.get_finished_spans()
    (start,) = _by_name(finished, "durableflow.start")
    (delivery,) = _by_name(finished, "durableflow.delivery")
    assert delivery.parent.span_id == start.context.span_id
    assert [link.context.span_id for link in delivery.links] == [sender.get_span_context().span_id]


def test_a_message_carried_context_is_current_while_its_task_runs(spans):
    with tracing.tracer().start_as_current_span("sender") as sender:
        headers = tracing.carrier()
    assert set(headers) == {"traceparent"}
    assert tracing.carrier() is None  # nothing current out here
    with tracing.received({**headers, "other": "header"}):
        assert tracing.carrier() == headers
    with tracing.tracer().start_as_current_span("a Celery instrumentation's") as current:
        with tracing.received(headers):  # a span current already is kept
            assert tracing.carrier()["traceparent"].split("-")[2] == f"{current.get_span_context().span_id:016x}"
    assert sender.get_span_context().trace_id != current.get_span_context().trace_id


def test_a_provider_set_later_is_found_within_the_recheck_and_at_once_after_a_fork():
    script = (
        "import os, time\n"
        "from durableflow.engine import tracing\n"
        "tracing.RECHECK_SECONDS = 0.2\n"
        "print(tracing.tracer())\n"
        "from opentelemetry import trace\n"
        "from opentelemetry.sdk.trace import TracerProvider\n"
        "trace.set_tracer_provider(TracerProvider())\n"
        "print(tracing.tracer())\n"
        "pid = os.fork()\n"
        "if pid == 0:\n"
        "    print('child', tracing.tracer() is not None, flush=True)\n"
        "    os._exit(0)\n"
        "os.waitpid(pid, 0)\n"
        "time.sleep(0.25)\n"
        "print('later', tracing.tracer() is not None)\n"
    )
    assert _printed(script).splitlines() == ["None", "None", "child True", "later True"]


def test_tracing_adds_no_statement_to_a_start_or_a_delivery(db):
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from tests.harness import OrmHarness

    harness = OrmHarness()

    def statements(traced: bool) -> tuple[int, int]:
        with tracing.override(TracerProvider()) if traced else contextlib.nullcontext():
            with CaptureQueriesContext(connection) as started:
                execution_id = harness.start("tracing.three", {"tag": f"queries-{traced}"})
            with CaptureQueriesContext(connection) as delivered:
                harness.deliver(execution_id)
        return len(started), len(delivered)

    assert statements(traced=True) == statements(traced=False)


def test_a_polls_not_yet_is_not_a_failure_and_a_transaction_try_is_a_step_span(backend, spans):
    execution_id = backend.start("tracing.kinds", {"tag": f"kinds-{backend.name}"})
    assert backend.run(execution_id).status == "completed"

    steps = _by_name(spans.get_finished_spans(), "durableflow.step")
    names = ("durableflow.step_key", "durableflow.step_kind", "durableflow.attempt")
    assert [tuple(span.attributes[name] for name in names) for span in steps] == [("ready", "poll", 1), ("ready", "poll", 2), ("book", "transaction", 1)]
    assert {span.status.status_code for span in steps} == {StatusCode.UNSET}
