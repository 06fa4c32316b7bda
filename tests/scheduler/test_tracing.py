"""Traces (issue 19, item 5): the SDK's in-memory exporter, a real node and gRPC, and a
task whose steps run on two primaries one after the other."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from apollo11.scheduler import tracing
from apollo11.scheduler.client import Client
from apollo11.scheduler.clock import FakeClock
from apollo11.scheduler.config import NodeSettings
from apollo11.scheduler.examples import etl
from apollo11.scheduler.node import Node
from apollo11.scheduler.state import TaskStatus
from apollo11.scheduler.workflow import Idempotent, Registry, StepContext, Workflow
from tests.scheduler.test_engine import make_rig


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    tracing.install(SimpleSpanProcessor(exporter))
    yield exporter
    tracing.uninstall()


def _by_name(found: tuple[ReadableSpan, ...]) -> dict[str, list[ReadableSpan]]:
    out: dict[str, list[ReadableSpan]] = {}
    for s in found:
        out.setdefault(s.name, []).append(s)
    return out


def _parent_id(s: ReadableSpan) -> int:
    assert s.parent is not None, s.name
    return s.parent.span_id


async def test_submit_task_and_step_spans_from_the_clients_traceparent(
    spans: InMemorySpanExporter, tmp_path: Path
) -> None:
    registry = Registry()
    registry.register(etl)
    node = Node(
        NodeSettings(node_id="n1", data_dir=tmp_path / "d", listen="127.0.0.1:0"),
        registry=registry,
    )
    await node.start()
    try:
        tracer = tracing._tracer()
        async with Client(f"127.0.0.1:{node.port}") as c:
            with tracer.start_as_current_span("the application") as app:
                sub = await c.submit("etl", {"step_seconds": 0})
            await c.wait(sub.task_id, timeout=30)
        async with asyncio.timeout(10):
            while not _by_name(spans.get_finished_spans()).get("task etl"):
                await asyncio.sleep(0.02)
    finally:
        await node.stop()
    named = _by_name(spans.get_finished_spans())
    trace_id = app.get_span_context().trace_id
    (submit,) = named["apollo11.SubmitTask"]
    (task,) = named["task etl"]
    assert submit.context.trace_id == task.context.trace_id == trace_id
    assert _parent_id(submit) == app.get_span_context().span_id  # from the gRPC metadata
    assert _parent_id(task) == submit.context.span_id
    assert submit.attributes is not None and submit.attributes["apollo11.task_id"] == sub.task_id
    steps = [s for name, ss in named.items() if name.startswith("step ") for s in ss]
    assert sorted(s.name for s in steps) == sorted(f"step {n}" for n in etl.steps)
    for s in steps:
        assert s.context.trace_id == trace_id and _parent_id(s) == task.context.span_id
        attrs: Any = s.attributes
        assert attrs["apollo11.task_id"] == sub.task_id and attrs["apollo11.attempt"] == 1
        assert attrs["apollo11.term"] >= 1
    assert task.start_time is not None and task.end_time is not None
    assert task.start_time <= min(s.start_time or 0 for s in steps)


gate = asyncio.Event()
slow = Workflow("slow", version=1)


@slow.step(idempotency=Idempotent())
async def first(ctx: StepContext) -> str:
    return "one"


@slow.step(after=["first"], idempotency=Idempotent())
async def second(ctx: StepContext) -> str:
    await gate.wait()
    return "two"


async def test_attempt_spans_on_two_primaries_hang_from_the_same_task_span(
    spans: InMemorySpanExporter, tmp_path: Path
) -> None:
    rig = await make_rig(tmp_path / "d", FakeClock(), slow)
    with tracing.submit_span([], "apollo11.SubmitTask") as submit:
        sub = await rig.engine.submit("slow", trace=tracing.task_trace(submit))
    async with asyncio.timeout(10):
        while rig.store.state.tasks[sub.task_id].steps["second"].status.value != "STARTED":
            await asyncio.sleep(0.01)
    gate.clear()
    rig = await rig.reopen(slow)  # the primary is gone: a new term runs what is left
    gate.set()
    try:
        async with asyncio.timeout(20):
            while True:
                task = rig.store.state.peek(sub.task_id)
                if task is not None and task.status is TaskStatus.SUCCEEDED:
                    break
                rig.clock.advance(5)  # the lost attempt's backoff
                await asyncio.sleep(0.01)
    finally:
        await rig.engine.stop()
        await rig.store.close()
    named = _by_name(spans.get_finished_spans())
    (task_span,) = named["task slow"]
    attempts = named["step first"] + named["step second"]
    terms = {(s.name, (s.attributes or {})["apollo11.term"]) for s in attempts}
    assert len({t for _, t in terms}) == 2, terms  # two primaries ran its attempts
    for s in attempts:
        assert s.context.trace_id == task_span.context.trace_id
        assert _parent_id(s) == task_span.context.span_id
    assert _parent_id(task_span) == named["apollo11.SubmitTask"][0].context.span_id
