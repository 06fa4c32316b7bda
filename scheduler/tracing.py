"""Traces (OpenTelemetry): a span per submission, per task and per step attempt.

A task outlives processes (a failover, a worker's death, a week's wait), so its
trace context is a fact in the log, not an open span in memory:

* SubmitTask (and each task of SubmitTasks) is a SERVER span, the child of the
  W3C `traceparent` the client sent in its gRPC metadata (a new trace when it
  sent none). The task's span id is chosen there, and the TASK_SUBMITTED records
  `trace: {"traceparent": "00-<trace id>-<task span id>-01", "parent": <the
  submit span id>}`;
* every step attempt, on whichever primary runs it, is a span whose parent is
  that task span (attributes: task id, workflow, step, attempt, term, worker),
  and the attempt's code runs inside it: a step's own spans nest under it (the
  worker sets the same context from the assignment's `traceparent`);
* the task span itself is emitted by the primary that sees the task finish,
  with the id chosen at submit and the submission's time as its start.

So a trace reads submit -> task -> step attempts, whichever nodes ran them.

Off unless configured (`configure()`: the node's `--otlp-endpoint`, or the
standard OTEL_EXPORTER_OTLP_ENDPOINT; the OTLP exporter is the optional extra
`apollo11[otlp]`), or installed by a test (`install()`, an in-memory exporter):
when off, nothing here costs more than a flag test.
"""

from __future__ import annotations

import contextlib
import contextvars
import random
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import (
    NonRecordingSpan,
    Span,
    SpanContext,
    SpanKind,
    Status,
    StatusCode,
    TraceFlags,
)
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

_PROPAGATOR = TraceContextTextMapPropagator()
_ids = random.Random()
_provider: Any = None  # the SDK TracerProvider when tracing is on
_next_span_id: contextvars.ContextVar[int | None] = contextvars.ContextVar(
    "apollo11_next_span_id", default=None
)


def on() -> bool:
    return _provider is not None


def _tracer() -> trace.Tracer:
    assert _provider is not None
    return _provider.get_tracer("apollo11")  # type: ignore[no-any-return]


# ------------------------------------------------------------------ setup


def install(processor: Any, *, service: str = "apollo11") -> None:
    """Turn tracing on with `processor` (an SDK SpanProcessor: a test's in-memory
    exporter behind a SimpleSpanProcessor, or OTLP behind a BatchSpanProcessor)."""
    global _provider
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.id_generator import RandomIdGenerator

    class _Ids(RandomIdGenerator):
        """A task span's id is chosen at submit, and its span made when it ends."""

        def generate_span_id(self) -> int:
            chosen = _next_span_id.get()
            return chosen if chosen is not None else super().generate_span_id()

    provider = TracerProvider(
        resource=Resource.create({"service.name": service}), id_generator=_Ids()
    )
    provider.add_span_processor(processor)
    _provider = provider


def uninstall() -> None:
    global _provider
    if _provider is not None:
        with contextlib.suppress(Exception):
            _provider.shutdown()
    _provider = None


def configure(endpoint: str, *, service: str) -> str:
    """Export spans to an OTLP collector at `endpoint` (gRPC, e.g. http://host:4317).
    Returns a sentence for the log; raises RuntimeError naming the extra when the
    exporter is not installed."""
    try:
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
    except ImportError as e:
        raise RuntimeError(
            f"--otlp-endpoint needs the OTLP exporter: pip install 'apollo11[otlp]' ({e})"
        ) from e
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    install(BatchSpanProcessor(OTLPSpanExporter(endpoint=endpoint)), service=service)
    return f"traces: exporting spans to {endpoint} (OTLP)"


# ------------------------------------------------------------------ submit


def _parent(metadata: Sequence[tuple[str, Any]] | None) -> otel_context.Context | None:
    carrier = {str(k): str(v) for k, v in metadata or () if str(k) in ("traceparent", "tracestate")}
    return _PROPAGATOR.extract(carrier) if carrier else None


@contextlib.contextmanager
def submit_span(metadata: Sequence[tuple[str, Any]] | None, name: str) -> Iterator[Span | None]:
    """The span of one submission call (None when tracing is off)."""
    if _provider is None:
        yield None
        return
    with _tracer().start_as_current_span(
        name, context=_parent(metadata), kind=SpanKind.SERVER
    ) as span:
        yield span


def task_trace(span: Span | None) -> dict[str, str] | None:
    """What a TASK_SUBMITTED records: the task span's traceparent (a new span id under
    the submission's trace) and the submission span's id."""
    if span is None:
        return None
    sc = span.get_span_context()
    task_span = _ids.getrandbits(64) or 1
    return {
        "traceparent": f"00-{sc.trace_id:032x}-{task_span:016x}-01",
        "parent": f"{sc.span_id:016x}",
    }


def _context_of(traceparent: str) -> otel_context.Context | None:
    ctx = _PROPAGATOR.extract({"traceparent": traceparent})
    span = trace.get_current_span(ctx)
    return ctx if span.get_span_context().is_valid else None


# ------------------------------------------------------------------ attempts


@contextlib.contextmanager
def attempt_span(
    trace_info: Mapping[str, Any] | None, attributes: Mapping[str, Any]
) -> Iterator[Span | None]:
    """The span of one step attempt, the child of its task's span, current while the
    attempt runs (a step's own spans nest under it)."""
    if _provider is None or not trace_info:
        yield None
        return
    parent = _context_of(str(trace_info.get("traceparent", "")))
    name = f"step {attributes.get('apollo11.step')}"
    with _tracer().start_as_current_span(
        name, context=parent, kind=SpanKind.INTERNAL, attributes=dict(attributes)
    ) as span:
        yield span


def failed(span: Span | None, why: str) -> None:
    if span is not None:
        span.set_status(Status(StatusCode.ERROR, why[:512]))


@contextlib.contextmanager
def current(traceparent: str) -> Iterator[None]:
    """Run with `traceparent` as the current trace context (a worker's attempt: its
    step's spans nest under the primary's attempt span)."""
    ctx = _context_of(traceparent) if traceparent else None
    if ctx is None:
        yield
        return
    token = otel_context.attach(ctx)
    try:
        yield
    finally:
        otel_context.detach(token)


def traceparent_now() -> str:
    """The current span's traceparent (what an assignment carries to its worker)."""
    carrier: dict[str, str] = {}
    _PROPAGATOR.inject(carrier)
    return carrier.get("traceparent", "")


# ------------------------------------------------------------------ tasks


def task_ended(
    trace_info: Mapping[str, Any] | None,
    *,
    name: str,
    start_ms: int,
    end_ms: int,
    attributes: Mapping[str, Any],
    error: str | None,
) -> None:
    """Emit a finished task's span, with the id its submission chose (the parent of
    every attempt span) and the submission span as its parent."""
    if _provider is None or not trace_info:
        return
    try:
        _, trace_hex, span_hex, _ = str(trace_info["traceparent"]).split("-")
        parent_id = int(str(trace_info["parent"]), 16)
        trace_id, span_id = int(trace_hex, 16), int(span_hex, 16)
    except (KeyError, ValueError):
        return
    parent = SpanContext(trace_id, parent_id, is_remote=True, trace_flags=TraceFlags(1))
    ctx = trace.set_span_in_context(NonRecordingSpan(parent))
    token = _next_span_id.set(span_id)
    try:
        span = _tracer().start_span(
            name,
            context=ctx,
            kind=SpanKind.INTERNAL,
            attributes=dict(attributes),
            start_time=start_ms * 1_000_000,
        )
    finally:
        _next_span_id.reset(token)
    if error is not None:
        span.set_status(Status(StatusCode.ERROR, error[:512]))
    span.end(end_time=max(start_ms, end_ms) * 1_000_000)
