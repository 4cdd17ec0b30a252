"""A traced run on real workers: with ``DURABLEFLOW_TEST_SPANS`` set (a folder), the process sets
an OpenTelemetry SDK provider whose in-memory exporter also appends each finished span, as one
JSON line, to ``<folder>/<pid>.jsonl``, for the test process to read (tests/live/test_tracing_live.py)."""

from __future__ import annotations

import os
from pathlib import Path

import durableflow
from durableflow import RetryableError
from tests.testapp.models import Marker

WORKFLOW = "t.traced"


def _headers_seen(tag: str) -> int:
    """Mark the trace context the delivery's message carried (its ``traceparent`` header)."""
    from celery import current_task

    Marker.hit(f"{tag}:traceparent:{(current_task.request.headers or {}).get('traceparent')}")
    return 1


def _fails_once(tag: str) -> str:
    Marker.hit(f"{tag}:attempt")
    if Marker.count(f"{tag}:attempt") == 1:
        raise RetryableError("the first attempt fails", max_attempts=2, retry_interval=0.2)
    return "ok"


@durableflow.workflow(WORKFLOW)
def traced(ctx, params):
    ctx.step.run("first", _headers_seen, params["tag"])
    ctx.step.run("second", _fails_once, params["tag"])
    return ctx.step.run("third", lambda: 3)


def _trace_to(folder: Path) -> None:
    from opentelemetry import trace
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    class SpanFiles(InMemorySpanExporter):
        def export(self, spans):
            done = super().export(spans)
            # Opened per export: pool processes are forked after this provider is set.
            with open(folder / f"{os.getpid()}.jsonl", "a") as out:
                out.writelines(span.to_json(indent=None) + "\n" for span in spans)
            return done

    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(SpanFiles()))
    trace.set_tracer_provider(provider)


if os.environ.get("DURABLEFLOW_TEST_SPANS"):
    _trace_to(Path(os.environ["DURABLEFLOW_TEST_SPANS"]))
