"""What OpenTelemetry tracing costs a delivery: the same workflow traced and not.

Deliveries run in this process as a worker runs them (``operations.deliver``), on a queue no
worker consumes: ``bench.steps`` of S trivial steps in one delivery, two kinds interleaved:

- ``untraced``: no tracer provider (the default: each hook returns after one check);
- ``traced``: an SDK ``TracerProvider`` with a ``SimpleSpanProcessor`` into an in-memory
  exporter (emptied after each delivery), so each start, delivery and step attempt makes its
  span and exports it at once; no network.

Reported: the delivery of one step (ms), traced over untraced; the marginal cost of a step
(slope between the smallest and the largest S); and, apart, what the hooks cost with tracing
off (µs per delivery of one step: the calls a delivery makes, timed in a loop).
"""

from __future__ import annotations

import time
from statistics import median
from typing import Any

from bench.kinds import delivered_ms, interleaved
from bench.stats import per_step

__all__ = ["overhead", "summarize", "rows"]

QUEUE = "bench-traces"
KINDS = ("untraced", "traced")
_HOOK_LOOPS = 100_000


def _provider() -> tuple[Any, Any]:
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return provider, exporter


def overhead(sizes: list[int], repeats: int) -> dict[str, Any] | None:
    """Per kind and size: delivery times (ms) and queries; the hooks' cost with tracing off.
    None where the OpenTelemetry SDK is not installed."""
    try:
        provider, exporter = _provider()
    except ImportError:
        return None
    from durableflow.engine import tracing

    def deliver(kind: str, steps: int) -> float:
        if kind == "untraced":
            return delivered_ms("bench.steps", {"steps": steps}, QUEUE)
        with tracing.override(provider):
            elapsed = delivered_ms("bench.steps", {"steps": steps}, QUEUE)
        exporter.clear()
        return elapsed

    out = interleaved(KINDS, deliver, sizes, repeats)
    out["off_hook_us"] = _hooks_off_us()
    provider.shutdown()
    return out


def _hooks_off_us() -> float:
    """µs of the tracing calls one delivery of one step makes, with no provider configured."""
    from durableflow.engine import tracing
    from durableflow.engine.records import Claim

    claim = Claim(execution_id="x", workflow="w", version="1", params=None, records={}, now=None)  # type: ignore
    if tracing.tracer() is not None:
        raise RuntimeError("a tracer provider is configured in the benchmark's process: the hooks would trace")
    began = time.perf_counter()
    for _ in range(_HOOK_LOOPS):
        with tracing.starting("w", "1", "q", "x"):
            tracing.carrier()  # the row's field and the message's headers
            tracing.carrier()
        with tracing.received({"traceparent": "00-..."}):
            with tracing.delivery(claim, tracing.clock()) as span:
                with tracing.step(claim, "s0", "run", 1) as step:
                    tracing.failed(step, None)
                tracing.delivered(span, None)
    return (time.perf_counter() - began) / _HOOK_LOOPS * 1e6


def summarize(raw: dict[str, Any]) -> dict[str, Any]:
    """Per kind: the one-step delivery (median ms), marginal ms per step; traced over untraced."""
    out: dict[str, Any] = {}
    for kind in KINDS:
        smallest = min(raw[kind], key=int)
        out[kind] = {**per_step(raw[kind]), "delivery_ms": median(raw[kind][smallest]["ms"])}
    traced, untraced = out["traced"], out["untraced"]
    out["delivery_over_untraced"] = traced["delivery_ms"] / untraced["delivery_ms"]
    out["step_over_untraced"] = traced["ms_per_step"] / untraced["ms_per_step"]
    out["off_hook_us"] = raw["off_hook_us"]
    return out


def rows(summary: dict[str, Any]) -> list[tuple[str, float, str]]:
    """The report's lines: (label, value, unit)."""
    lines = []
    for kind, name in (("untraced", "no tracer provider"), ("traced", "SDK provider, in-memory exporter")):
        lines.append((f"tracing: delivery of a 1-step workflow, {name}", summary[kind]["delivery_ms"], " ms"))
        lines.append((f"tracing: run step, {name}: marginal cost", summary[kind]["ms_per_step"], " ms"))
    lines.append(("tracing: traced / untraced delivery", summary["delivery_over_untraced"], "x"))
    lines.append(("tracing: traced / untraced run step", summary["step_over_untraced"], "x"))
    lines.append(("tracing: the hooks of a delivery with no provider", summary["off_hook_us"], " µs"))
    return lines
