"""OpenTelemetry spans: a start, each delivery, each live step attempt. Off unless a tracer
provider is configured.

With ``opentelemetry-api`` installed (the ``durableflow[otel]`` extra) and a provider set
(``opentelemetry.trace.set_tracer_provider``, or the ``OTEL_PYTHON_TRACER_PROVIDER`` variable),
the engine makes:

``durableflow.start <workflow>`` (kind PRODUCER)
    around ``start`` (one span for a ``start_many``), a child of whatever span is current: the
    request's, say. Its context is written with the new execution (``trace_context``, in the
    propagator's text form) and sent in the delivery's message headers.
``durableflow.delivery <workflow>`` (CONSUMER)
    a delivery that claimed the execution, from the claim to the outcome; a child of the start
    (read from the row, so a delivery the sweep sent after a retry's wait is in the trace
    too), linked to the span that sent its message when that is another one (an event sent
    from a request, say). A delivery that claims nothing (a duplicate message) makes no span.
``durableflow.step <key>`` (INTERNAL)
    one live attempt of a step body (run, poll, transaction, effect, an item task's); replayed
    steps make none. A failed attempt has status ERROR and an ``exception`` event.

Their attributes are ``durableflow.*``: ``execution_id``, ``workflow``, ``version``, ``queue``,
``delivery`` (its number), ``outcome`` (a delivery's: ``completed``, ``suspended``,
``failed``...), ``step_key``, ``step_kind``, ``attempt`` (an item task's span has no workflow
nor version: the task reads only its item; it is a child of the delivery that sent it, whose
context its message carries). A delivery that fails its run, or
stalls, has status ERROR with the recorded error as its ``exception`` event.

Without a provider every entry point returns after a clock read (the provider is looked for
again each ``RECHECK_SECONDS``), a microsecond or two a delivery in all; without the package the
same: it is imported once, when first asked for.
"""

from __future__ import annotations

import os
import time
from contextlib import AbstractContextManager, contextmanager, nullcontext
from typing import Any, Iterator

__all__ = [
    "tracer",
    "override",
    "carrier",
    "received",
    "starting",
    "delivery",
    "step",
    "item",
    "failed",
    "delivered",
    "clock",
]

NAME = "durableflow"
_NULL: AbstractContextManager[None] = nullcontext()

# While no provider is configured, it is looked for again this often (seconds): asking
# OpenTelemetry costs about a microsecond, a clock read a twentieth of that.
RECHECK_SECONDS = 1.0

_otel: Any = None  # the imported API (a namespace), or False where it is not installed
_tracer: Any = None  # once a provider is configured (OpenTelemetry lets it be set only once)
_unset_until = 0.0  # while none is: when to look again (time.monotonic())


def tracer() -> Any:
    """durableflow's tracer, or None: no provider configured, or no OpenTelemetry API.

    A provider configured later in the process is found within ``RECHECK_SECONDS``; at once in
    a process forked since (a Celery pool process that sets it in ``worker_process_init``).
    """
    if _tracer is not None:
        return _tracer
    if time.monotonic() < _unset_until:
        return None
    return _look()


def _look() -> Any:
    global _tracer, _unset_until
    api = _otel if _otel is not None else _import()
    if api is False:
        _unset_until = float("inf")
        return None
    provider = api.trace.get_tracer_provider()
    if isinstance(provider, (api.trace.ProxyTracerProvider, api.trace.NoOpTracerProvider)):
        _unset_until = time.monotonic() + RECHECK_SECONDS  # nothing configured (yet): spans would go nowhere
        return None
    from durableflow import __version__

    _tracer = provider.get_tracer(NAME, __version__)
    return _tracer


def _forked() -> None:
    global _unset_until
    _unset_until = 0.0


os.register_at_fork(after_in_child=_forked)


def _import() -> Any:
    global _otel
    try:
        from opentelemetry import context, propagate, trace
    except ImportError:
        _otel = False
        return False
    from types import SimpleNamespace

    _otel = SimpleNamespace(context=context, propagate=propagate, trace=trace)
    return _otel


@contextmanager
def override(provider: Any) -> Iterator[None]:
    """Within the block, trace with ``provider`` instead of the global one (for tests: the
    global provider of a process can be set only once)."""
    global _tracer
    if _import() is False:
        raise RuntimeError("tracing needs the opentelemetry-api package (pip install 'durableflow[otel]')")
    previous, _tracer = _tracer, provider.get_tracer(NAME)
    try:
        yield
    finally:
        _tracer = previous


def clock() -> int:
    """Now, as a span's start time (a delivery's span starts at its claim's start)."""
    return time.time_ns()


def carrier() -> dict[str, str] | None:
    """The current span's context in the propagator's text form (``traceparent``...), or None."""
    if tracer() is None or not _otel.trace.get_current_span().get_span_context().is_valid:
        return None
    found: dict[str, str] = {}
    _otel.propagate.inject(found)
    return found or None


def received(headers: dict[str, Any] | None) -> AbstractContextManager[Any]:
    """Within the block, the context a message carried is the current one (an item task's
    span is its child; a delivery's is linked to it), unless a span is current already (a
    Celery instrumentation's, itself read from the same headers)."""
    if not headers or tracer() is None:
        return _NULL
    if _otel.trace.get_current_span().get_span_context().is_valid:
        return _NULL
    return _attached(_otel.propagate.extract(headers))


@contextmanager
def _attached(context: Any) -> Iterator[None]:
    token = _otel.context.attach(context)
    try:
        yield
    finally:
        _otel.context.detach(token)


def starting(workflow: str, version: str, queue: str, execution_id: str | None = None) -> AbstractContextManager[Any]:
    """The span of a start (``execution_id`` None: a ``start_many``'s)."""
    found = tracer()
    if found is None:
        return _NULL
    attributes = {"durableflow.workflow": workflow, "durableflow.version": version, "durableflow.queue": queue}
    if execution_id is not None:
        attributes["durableflow.execution_id"] = execution_id
    span = found.start_span(f"durableflow.start {workflow}", kind=_otel.trace.SpanKind.PRODUCER, attributes=attributes)
    return _otel.trace.use_span(span, end_on_exit=True)


def delivery(claim: Any, began: int) -> AbstractContextManager[Any]:
    """The span of a delivery that claimed ``claim``, started at ``began`` (``clock()``), a
    child of the run's start and linked to the current span (the message's sender) if that
    is another one."""
    found = tracer()
    if found is None:
        return _NULL
    api = _otel
    current = api.trace.get_current_span().get_span_context()
    parent = api.propagate.extract(claim.trace_context) if claim.trace_context else None
    links = None
    if parent is not None and current.is_valid:
        if api.trace.get_current_span(parent).get_span_context().span_id != current.span_id:
            links = [api.trace.Link(current)]
    attributes = {
        "durableflow.execution_id": claim.execution_id,
        "durableflow.workflow": claim.workflow,
        "durableflow.version": claim.version,
        "durableflow.queue": claim.queue,
        "durableflow.delivery": claim.delivery,
    }
    span = found.start_span(
        f"durableflow.delivery {claim.workflow}",
        context=parent,
        kind=api.trace.SpanKind.CONSUMER,
        attributes=attributes,
        links=links,
        start_time=began,
    )
    return api.trace.use_span(span, end_on_exit=True)


def delivered(span: Any, outcome: Any) -> None:
    """Mark a delivery's span with the outcome it recorded (ERROR for a failed or stalled run)."""
    if span is None:
        return
    name = type(outcome).__name__.lower()
    span.set_attribute("durableflow.outcome", name)
    error = getattr(outcome, "error", None)
    if name in ("failed", "stalled") or getattr(outcome, "status", None) == "compensation_failed":
        failed(span, error)


def step(claim: Any, key: str, kind: str, attempt: int) -> AbstractContextManager[Any]:
    """The span of one live attempt of step ``key`` of the claimed execution."""
    found = tracer()
    if found is None:
        return _NULL
    attributes = {
        "durableflow.execution_id": claim.execution_id,
        "durableflow.workflow": claim.workflow,
        "durableflow.version": claim.version,
        "durableflow.step_key": key,
        "durableflow.step_kind": kind,
        "durableflow.attempt": attempt,
    }
    return _step(found, key, attributes)


def item(execution_id: str, key: str, attempt: int) -> AbstractContextManager[Any]:
    """The span of one attempt of an item task (a map item, a ``run(queue=)`` step)."""
    found = tracer()
    if found is None:
        return _NULL
    attributes = {
        "durableflow.execution_id": execution_id,
        "durableflow.step_key": key,
        "durableflow.step_kind": "item",
        "durableflow.attempt": attempt,
    }
    return _step(found, key, attributes)


def _step(found: Any, key: str, attributes: dict[str, Any]) -> AbstractContextManager[Any]:
    span = found.start_span(f"durableflow.step {key}", attributes=attributes)
    return _otel.trace.use_span(span, end_on_exit=True)


def failed(span: Any, error: BaseException | dict[str, Any] | None) -> None:
    """Record ``error`` (an exception, or one as journaled) on ``span``: status ERROR and an
    ``exception`` event. ``span`` None (tracing off): nothing."""
    if span is None or not span.is_recording():
        return
    api = _otel.trace
    if isinstance(error, BaseException):
        span.record_exception(error)
        description = f"{type(error).__name__}: {error}"
    else:
        error = error or {}
        event = {"exception.type": str(error.get("type", "")), "exception.message": str(error.get("message", ""))}
        if error.get("traceback"):
            event["exception.stacktrace"] = str(error["traceback"])
        if error.get("code"):
            event["durableflow.error_code"] = str(error["code"])
        span.add_event("exception", event)
        description = f"{event['exception.type'].rpartition('.')[2]}: {event['exception.message']}"
    span.set_status(api.Status(api.StatusCode.ERROR, description))
