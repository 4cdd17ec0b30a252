"""OpenTelemetry across processes: a run started in this process under a request's span and
run by a real worker is one trace of the start, every delivery and every step attempt.

The worker sets an SDK provider whose in-memory exporter also writes each span to a file per
process (tests/testapp/traced.py); this process traces into an in-memory exporter of its own.
"""

from __future__ import annotations

import json

import pytest

import durableflow
from durableflow.engine import tracing
from durableflow.models import Execution
from tests.helpers import uid, wait_for, wait_status
from tests.testapp.models import Marker

pytestmark = pytest.mark.integration
pytest.importorskip("opentelemetry.sdk.trace")

from opentelemetry.sdk.trace import TracerProvider  # noqa: E402
from opentelemetry.sdk.trace.export import SimpleSpanProcessor  # noqa: E402
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter  # noqa: E402


def _worker_spans(folder, execution_id):
    found = []
    for path in sorted(folder.glob("*.jsonl")):
        for line in path.read_text().splitlines():
            span = json.loads(line)
            if span["attributes"].get("durableflow.execution_id") == execution_id:
                found.append({**span, "pid": int(path.stem)})
    return sorted(found, key=lambda span: span["start_time"])


def _started_traced(workflow, params, queue):
    """Start ``workflow`` under a request's span, traced into an in-memory exporter: (start span, request span)."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    with tracing.override(provider):
        with tracing.tracer().start_as_current_span("POST /orders/") as request:
            execution = durableflow.start(workflow, params, queue=queue)
    provider.shutdown()
    (start,) = [span for span in exporter.get_finished_spans() if span.name.startswith("durableflow.start")]
    return execution, start, request


def _finished_spans(folder, execution_id):
    """The worker's spans of a completed run, once its every delivery span is written."""
    wait_status(execution_id, "completed", timeout=60)
    deliveries = Execution.objects.get(pk=execution_id).deliveries
    return wait_for(
        lambda: (found := _worker_spans(folder, execution_id))
        and sum(s["name"].startswith("durableflow.delivery") for s in found) == deliveries
        and found,
        timeout=30,
        what="the worker's delivery spans",
    )


def test_a_run_with_a_retry_on_a_worker_is_one_trace_with_its_start(workers, live_db, tmp_path):
    queue, tag = uid("q"), uid("traced")
    worker = workers(queue, concurrency=2, env={"DURABLEFLOW_TEST_SPANS": str(tmp_path)})
    execution, start, request = _started_traced("t.traced", {"tag": tag}, queue)
    trace_id = f"0x{request.get_span_context().trace_id:032x}"
    spans = _finished_spans(tmp_path, execution.id)
    deliveries = Execution.objects.get(pk=execution.id).deliveries

    assert start.parent.span_id == request.get_span_context().span_id
    start_id = f"0x{start.context.span_id:016x}"
    assert {span["context"]["trace_id"] for span in spans} == {trace_id}
    delivery_spans = [span for span in spans if span["name"].startswith("durableflow.delivery")]
    step_spans = [span for span in spans if span["name"].startswith("durableflow.step")]
    # The retry waits 0.2 s: the sweep sends the next delivery, which still has the start as parent.
    assert deliveries == len(delivery_spans) == 2
    assert {span["parent_id"] for span in delivery_spans} == {start_id}
    assert [span["attributes"]["durableflow.outcome"] for span in delivery_spans] == ["suspended", "completed"]
    assert [(s["attributes"]["durableflow.step_key"], s["attributes"]["durableflow.attempt"]) for s in step_spans] == [
        ("first", 1),
        ("second", 1),
        ("second", 2),
        ("third", 1),
    ]
    first, second = (span["context"]["span_id"] for span in delivery_spans)
    assert [span["parent_id"] for span in step_spans] == [first, first, second, second]
    failed = step_spans[1]
    assert failed["status"]["status_code"] == "ERROR"
    assert [event["name"] for event in failed["events"]] == ["exception"]
    # The first delivery's message carried the start's context (the sweep's, the second's, none).
    (header,) = Marker.objects.filter(name__startswith=f"{tag}:traceparent:").values_list("name", flat=True)
    assert header.startswith(f"{tag}:traceparent:00-{trace_id[2:]}-{start_id[2:]}-")  # then the trace flags
    assert {span["pid"] for span in spans} <= set(worker.children())  # written by the pool processes


def test_the_item_tasks_of_a_map_are_children_of_the_delivery_that_sent_them(workers, live_db, tmp_path):
    queue = uid("q")
    workers(queue, concurrency=2, env={"DURABLEFLOW_TEST_SPANS": str(tmp_path)})
    execution, start, _ = _started_traced("t.map", {"n": 2}, queue)
    spans = _finished_spans(tmp_path, execution.id)

    assert {span["context"]["trace_id"] for span in spans} == {f"0x{start.context.trace_id:032x}"}
    sender = next(span for span in spans if span["name"].startswith("durableflow.delivery"))
    items = [span for span in spans if span["attributes"].get("durableflow.step_kind") == "item"]
    assert sorted(span["attributes"]["durableflow.step_key"] for span in items) == ["items[0]", "items[1]"]
    assert {span["parent_id"] for span in items} == {sender["context"]["span_id"]}  # carried in their messages
