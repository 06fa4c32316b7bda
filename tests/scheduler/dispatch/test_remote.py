"""The primary's half of remote execution, on a real node in this process and a
worker that speaks the protocol by hand (tests/scheduler/dispatch/rawworker.py)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from apollo11.scheduler import tracing
from apollo11.scheduler.client import Client
from apollo11.scheduler.dispatch.conn import WorkerConn
from apollo11.scheduler.log import EventType
from apollo11.scheduler.node import Node
from apollo11.scheduler.state import TaskStatus
from apollo11.v1 import worker_pb2 as wpb

from .rawworker import RawWorker, running


async def _wait(node: Node, task_id: str, timeout: float = 20) -> Any:
    assert node.engine is not None
    async with asyncio.timeout(timeout):
        return await node.engine.wait(task_id)


def _events(node: Node, task_id: str, kind: EventType) -> list[Any]:
    assert node.store is not None
    return [e for e in node.store.log.read() if e.task_id == task_id and e.event_type is kind]


async def _one_assigned(start: Any) -> tuple[Node, RawWorker, str, Any]:
    """A node, a raw worker connected to it, and a pair task whose first step's
    assignment the worker holds."""
    node = await start()
    w = RawWorker(f"127.0.0.1:{node.port}")
    await w.connect()
    assert node.engine is not None
    task_id = (await node.engine.submit("pair", None)).task_id
    a = (await w.next("assign")).assignments[0]
    return node, w, task_id, a


@pytest.mark.parametrize("sender", ["prompt", "late"])
async def test_a_worker_runs_the_steps_and_the_started_names_it(
    start: Any, monkeypatch: pytest.MonkeyPatch, sender: str
) -> None:
    if sender == "late":
        # A loaded machine: the node's sender wakes after the result's ack and the next
        # step's assignment are both queued, and sends them in one drain, the
        # assignment first (what a make test at load 13 met).
        work = WorkerConn.work

        async def late(self: WorkerConn) -> None:
            await work(self)
            await asyncio.sleep(0.3)

        monkeypatch.setattr(WorkerConn, "work", late)
    node = await start()
    w = RawWorker(f"127.0.0.1:{node.port}")
    reg = await w.connect()
    assert reg.node_id == "n1" and reg.term >= 1 and reg.heartbeat_timeout_s == 1.0
    assert node.engine is not None
    task_id = (await node.engine.submit("pair", {"x": 1})).task_id
    a = (await w.next("assign")).assignments[0]
    assert (a.task_id, a.step, a.attempt, a.workflow, a.version) == (task_id, "first", 1, "pair", 1)
    started = _events(node, task_id, EventType.STEP_STARTED)
    assert started[0].payload == {"worker": "w1"}
    assert (a.token.term, a.token.event_id) == (started[0].term, started[0].event_id)
    await w.result(a, {"n": 1})
    acks = await w.next("acks")
    assert acks.acks[0].accepted and acks.acks[0].token == a.token
    b = (await w.next("assign")).assignments[0]
    assert b.step == "second" and b.results_json == b'{"first":{"n":1}}'
    await w.result(b, {"n": 2})
    task = await _wait(node, task_id)
    assert task.status is TaskStatus.SUCCEEDED
    assert task.steps["second"].result == {"n": 2}
    await w.close()


async def test_an_idle_stream_is_pinged_every_interval(start: Any) -> None:
    """A frozen primary's socket stays open: its workers know it is alive only by
    what it writes, so an idle stream gets an empty Acks every interval (0.2 s)."""
    node = await start()
    w = RawWorker(f"127.0.0.1:{node.port}")
    reg = await w.connect()
    assert reg.pings and reg.heartbeat_interval_s == 0.2
    loop = asyncio.get_running_loop()
    t0 = loop.time()
    pings = [await w.next("acks", timeout=2, pings=True) for _ in range(3)]
    assert [len(p.acks) for p in pings] == [0, 0, 0]
    assert loop.time() - t0 < 2.0
    await w.close()


async def test_no_worker_for_the_version_no_assignment(start: Any) -> None:
    node = await start()
    w = RawWorker(f"127.0.0.1:{node.port}")
    await w.connect(workflows=(("pair", 2),))
    assert node.engine is not None
    task_id = (await node.engine.submit("pair", None)).task_id
    async with asyncio.timeout(10):
        while task_id not in node.engine.problems:
            await asyncio.sleep(0.02)
    assert "registered pair v1" in node.engine.problems[task_id]
    async with Client(f"127.0.0.1:{node.port}") as c:  # what an operator sees of it
        shown = await c.task(task_id)
        assert shown.blocked == node.engine.problems[task_id]
    with pytest.raises(TimeoutError):
        await w.next("assign", timeout=0.5)
    assert _events(node, task_id, EventType.STEP_STARTED) == []
    # a worker that has the version connects: the step starts on it
    w2 = RawWorker(f"127.0.0.1:{node.port}", name="w2")
    await w2.connect()
    a = (await w2.next("assign")).assignments[0]
    assert a.task_id == task_id
    async with Client(f"127.0.0.1:{node.port}") as c:
        assert (await c.task(task_id)).blocked is None
    await w.close()
    await w2.close()


async def test_a_broken_stream_loses_its_attempts_and_they_run_again(start: Any) -> None:
    node, w, task_id, a = await _one_assigned(start)
    await w.close()  # the worker's socket closes
    w2 = RawWorker(f"127.0.0.1:{node.port}", name="w2")
    await w2.connect()
    b = (await w2.next("assign")).assignments[0]
    assert (b.step, b.attempt) == ("first", 2)
    failed = _events(node, task_id, EventType.STEP_FAILED)
    assert failed[0].payload["lost"] is True and "w1" in failed[0].payload["error"]
    # the first worker's late result (it was only cut off) is refused
    late = RawWorker(f"127.0.0.1:{node.port}", name="w1")
    await late.connect(workflows=())  # takes nothing new: the next step goes to w2
    await late.result(a, {"n": 99})
    ack = (await late.next("acks")).acks[0]
    assert not ack.accepted and "not the step's current attempt" in ack.reason
    await w2.result(b, {"n": 1})
    c = (await w2.next("assign")).assignments[0]
    await w2.result(c, {"n": 2})
    task = await _wait(node, task_id)
    assert task.steps["first"].result == {"n": 1}
    assert len(_events(node, task_id, EventType.STEP_SUCCEEDED)) == 2
    await w2.close()
    await late.close()


async def test_a_silent_worker_is_cut_off_and_its_heartbeat_details_carry_over(
    start: Any,
) -> None:
    node, w, task_id, a = await _one_assigned(start)
    w.beating = False
    await w.heartbeat(running(a, {"rows": 500}))
    # ... then nothing: past the heartbeat timeout (1 s) the worker is cut off
    w2 = RawWorker(f"127.0.0.1:{node.port}", name="w2")
    await w2.connect()
    b = (await w2.next("assign", timeout=15)).assignments[0]
    assert b.attempt == 2
    assert b.last_heartbeat_json == b'{"rows":500}'
    failed = _events(node, task_id, EventType.STEP_FAILED)
    assert "silent" in failed[0].payload["error"] and failed[0].payload["heartbeat"] == {
        "rows": 500
    }
    await w.close()
    await w2.close()


async def test_a_restarted_primary_adopts_the_attempt_and_does_not_run_it_again(
    start: Any, tmp_path: Path
) -> None:
    node, w, task_id, a = await _one_assigned(start)
    await node.stop()  # the attempt keeps running on the worker
    await w.close()
    node2 = await start()
    w_again = RawWorker(f"127.0.0.1:{node2.port}")
    w_again.instance = w.instance
    reg = await w_again.connect(running=(running(a),))
    assert list(reg.stale) == []
    await w_again.result(a, {"n": 1})
    ack = (await w_again.next("acks")).acks[0]
    assert ack.accepted
    b = (await w_again.next("assign")).assignments[0]
    assert b.step == "second"
    await w_again.result(b, {"n": 2})
    task = await _wait(node2, task_id)
    assert task.status is TaskStatus.SUCCEEDED
    firsts = [e for e in _events(node2, task_id, EventType.STEP_STARTED) if e.step_name == "first"]
    assert len(firsts) == 1, "the first step was not started a second time"
    await w_again.close()


async def test_cancel_reaches_the_worker_and_a_late_result_is_refused(start: Any) -> None:
    node, w, task_id, a = await _one_assigned(start)
    cancel = asyncio.create_task(node.engine.cancel_task(task_id, operator="t", reason="test"))
    c = await w.next("cancel")
    assert c.token == a.token
    await cancel
    await w.result(a, cancelled=True)
    task = await _wait(node, task_id)
    assert task.status is TaskStatus.CANCELLED
    await w.result(a, {"n": 1})  # too late: refused
    refused = []
    while not refused:
        refused = [x for x in (await w.next("acks")).acks if not x.accepted]
    assert "not the step's current attempt" in refused[0].reason
    assert _events(node, task_id, EventType.STEP_SUCCEEDED) == []
    await w.close()


async def test_a_standby_or_a_bad_registration_is_refused_clearly(start: Any) -> None:
    node = await start()
    w = RawWorker(f"127.0.0.1:{node.port}", slots=0)
    with pytest.raises(Exception, match=r"register\.slots: 1 to 10000, got 0"):
        await w.connect()
    await w.close()
    dup1 = RawWorker(f"127.0.0.1:{node.port}", name="same")
    await dup1.connect()
    dup2 = RawWorker(f"127.0.0.1:{node.port}", name="same")
    with pytest.raises(Exception, match="already connected"):
        await dup2.connect()
    await dup1.close()
    await dup2.close()


async def test_a_timeout_cancels_the_attempt_on_its_worker(start: Any) -> None:
    node = await start()
    w = RawWorker(f"127.0.0.1:{node.port}")
    await w.connect(workflows=(("slow", 1),))
    assert node.engine is not None
    task_id = (await node.engine.submit("slow", None)).task_id
    a = (await w.next("assign")).assignments[0]
    assert a.timeout_s == 0.5
    c = await w.next("cancel")  # the primary's timer fired: the worker is told
    assert c.token == a.token and "timed out" in c.reason
    # until the worker says it stopped, the step stays busy here: no retry beside it
    await asyncio.sleep(0.3)
    assert node.engine.is_busy(task_id, "only")
    await w.result(a, cancelled=True)
    task = await _wait(node, task_id)
    async with asyncio.timeout(10):  # the acknowledgement frees it
        while node.engine.is_busy(task_id, "only"):
            await asyncio.sleep(0.01)
    failed = _events(node, task_id, EventType.STEP_FAILED)
    assert failed[0].payload["timeout"] is True and task.status is TaskStatus.FAILED
    await w.result(a, "late")
    refused: list[Any] = []
    while not refused:
        refused = [x for x in (await w.next("acks")).acks if not x.accepted]
    assert _events(node, task_id, EventType.STEP_SUCCEEDED) == []
    await w.close()


async def test_status_and_the_workers_command_list_the_workers(start: Any) -> None:
    import json
    import sys

    node = await start()
    w = RawWorker(f"127.0.0.1:{node.port}", name="gpu-1", slots=3)
    await w.connect()
    st = node.views.status()
    assert st.execution == "remote"
    assert [(x.name, x.slots, x.slots_used, x.workflows) for x in st.workers] == [
        ("gpu-1", 3, 0, ("pair v1",))
    ]
    cli = (sys.executable, "-m", "apollo11.scheduler.cli")
    server = ("--server", f"127.0.0.1:{node.port}")
    proc = await asyncio.create_subprocess_exec(
        *cli, "workers", *server, "--json", stdout=asyncio.subprocess.PIPE
    )
    out, _ = await proc.communicate()
    listed = json.loads(out)
    assert [(x["name"], x["slots"], x["workflows"]) for x in listed] == [("gpu-1", 3, ["pair v1"])]
    proc = await asyncio.create_subprocess_exec(
        *cli, "status", *server, stdout=asyncio.subprocess.PIPE
    )
    out, _ = await proc.communicate()
    text = out.decode()
    assert "execution remote: 1 worker(s), 0/3 slots busy" in text
    assert "gpu-1" in text and "pair v1" in text
    await w.close()


async def test_both_uses_the_nodes_own_slots_first_then_the_workers(start: Any) -> None:
    from apollo11.scheduler.engine import SubmitItem

    node = await start(execution="both", concurrency=1)
    w = RawWorker(f"127.0.0.1:{node.port}")
    await w.connect()
    assert node.engine is not None
    ids = [s.task_id for s in await node.engine.submit_many([SubmitItem("pair")] * 2)]

    async def answer() -> None:
        while True:
            for a in (await w.next("assign", timeout=60)).assignments:
                await w.result(a, {"n": 1})

    answering = asyncio.create_task(answer())
    for t in ids:
        assert (await _wait(node, t)).status is TaskStatus.SUCCEEDED
    answering.cancel()
    where = [
        (e.payload or {}).get("worker")
        for t in ids
        for e in _events(node, t, EventType.STEP_STARTED)
    ]
    assert None in where, "some ran in the node's own slot"
    assert "w1" in where, "the rest on the worker"
    await w.close()


async def test_the_same_worker_on_a_new_stream_keeps_its_attempts(start: Any) -> None:
    """Its old stream broke on its side first (keepalive, a NAT): it reconnects as the
    same instance, reporting the attempt running. Nothing is lost or run twice."""
    node, w, task_id, a = await _one_assigned(start)
    again = RawWorker(f"127.0.0.1:{node.port}")
    again.instance = w.instance
    reg = await again.connect(running=(running(a),))
    assert list(reg.stale) == []
    await asyncio.sleep(0.3)
    assert _events(node, task_id, EventType.STEP_FAILED) == []
    await again.result(a, {"n": 1})
    assert (await again.next("acks")).acks[0].accepted
    b = (await again.next("assign")).assignments[0]
    await again.result(b, {"n": 2})
    assert (await _wait(node, task_id)).status is TaskStatus.SUCCEEDED
    assert len(_events(node, task_id, EventType.STEP_STARTED)) == 2
    await w.close()
    await again.close()


async def test_a_worker_cannot_speak_for_another_workers_attempt(start: Any) -> None:
    node = await start()
    w1 = RawWorker(f"127.0.0.1:{node.port}", name="w1", slots=1)
    await w1.connect()
    assert node.engine is not None
    task_id = (await node.engine.submit("pair", None)).task_id
    a = (await w1.next("assign")).assignments[0]
    w2 = RawWorker(f"127.0.0.1:{node.port}", name="w2")
    await w2.connect(workflows=(), running=(running(a),))  # claims it, too
    await w2.result(a, {"n": 666})
    await w2.result(a, cancelled=True)
    refused = [x for x in (await w2.next("acks")).acks if not x.accepted]
    assert refused and "given to worker w1" in refused[0].reason
    await asyncio.sleep(0.3)
    assert _events(node, task_id, EventType.STEP_SUCCEEDED) == []
    await w1.result(a, {"n": 1})  # the real one still counts
    assert (await w1.next("acks")).acks[0].accepted
    await w1.close()
    await w2.close()


async def test_a_graceful_stop_in_both_mode_fails_nothing_on_the_workers(start: Any) -> None:
    from apollo11.scheduler.engine import SubmitItem

    node = await start(execution="both", concurrency=1, drain_timeout=1.0)
    w = RawWorker(f"127.0.0.1:{node.port}")
    await w.connect()
    assert node.engine is not None
    await node.engine.submit_many([SubmitItem("pair")] * 2)
    a = (await w.next("assign")).assignments[0]  # never answered: it runs on
    await node.stop()
    await w.close()
    node2 = await start(execution="both", concurrency=1)
    failed = [e for e in _events(node2, a.task_id, EventType.STEP_FAILED) if e.step_name == a.step]
    assert failed == [], "the attempt on the worker was left for the next primary"


async def test_slots_freed_together_wake_as_many_waiting_tasks_as_they_can_take(
    start: Any,
) -> None:
    # A worker answering a batch frees its slots together. Each freed slot used to
    # send as many waiting tasks to be decided again as there were free slots then
    # (1 + 2 + ... + 16 for 16 slots), of which all but 16 found no slot and queued
    # again: 27 decisions for every attempt started under a backlog (bench workers).
    node = await start()
    slots, tasks = 16, 96
    w = RawWorker(f"127.0.0.1:{node.port}", slots=slots)
    await w.connect()
    engine = node.engine
    assert engine is not None
    ids = [(await engine.submit("pair", {"x": i})).task_id for i in range(tasks)]
    started = 0
    while started < 2 * tasks:
        batch = list((await w.next("assign")).assignments)
        while len(batch) < slots:  # what else comes for the free slots, then answer all
            try:
                batch.extend((await w.next("assign", timeout=0.2)).assignments)
            except TimeoutError:
                break
        started += len(batch)
        await w.results([(a, {"n": 1}) for a in batch])
    for task_id in ids:
        assert (await _wait(node, task_id)).status is TaskStatus.SUCCEEDED
    # Each task: its submission, each step's end, and each start that waited for a
    # slot: 464 here (1,119 before; 656 with the tasks woken counted but a step's
    # outcome decided before its slot was freed).
    assert engine.decisions <= 6 * tasks, (
        f"{engine.decisions} decisions for {tasks} tasks of two steps"
    )


async def test_a_traced_attempt_reaches_its_worker_with_the_attempts_span(start: Any) -> None:
    """The assignment's traceparent is the attempt's span (the worker's spans hang under
    it), though with tracing off the assignment is sent before that span would open."""
    exporter = InMemorySpanExporter()
    tracing.install(SimpleSpanProcessor(exporter))
    try:
        node = await start()
        w = RawWorker(f"127.0.0.1:{node.port}")
        await w.connect()
        async with Client(f"127.0.0.1:{node.port}") as c:
            with tracing._tracer().start_as_current_span("the application"):
                task_id = (await c.submit("pair", {"x": 1})).task_id
            a = (await w.next("assign")).assignments[0]
            await w.result(a, {"n": 1})
            b = (await w.next("assign")).assignments[0]
            await w.result(b, {"n": 2})
            assert (await c.wait(task_id, timeout=20)).state == "SUCCEEDED"
        await w.close()
    finally:
        tracing.uninstall()
    steps = {s.name: s for s in exporter.get_finished_spans() if s.name.startswith("step ")}
    for assignment, name in ((a, "step first"), (b, "step second")):
        _, trace_id, span_id, _ = assignment.traceparent.split("-")
        assert int(trace_id, 16) == steps[name].context.trace_id
        assert int(span_id, 16) == steps[name].context.span_id


async def _assignments(w: RawWorker, n: int) -> list[Any]:
    """The next `n` assignments, in however many messages they come."""
    got: list[Any] = []
    while len(got) < n:
        got += (await w.next("assign")).assignments
    return got


async def test_succeeded_results_in_columns_are_taken_and_a_stale_one_refused(
    start: Any,
) -> None:
    node = await start()
    w = RawWorker(f"127.0.0.1:{node.port}")
    reg = await w.connect()
    assert reg.packed_results  # this primary reads them
    assert node.engine is not None
    ids = [(await node.engine.submit("pair", {"x": i})).task_id for i in range(2)]
    firsts = await _assignments(w, 2)
    await w.packed([(a, {"n": 1}) for a in firsts])
    accepted: list[int] = []
    while len(accepted) < 2:  # old-form acks: this raw worker did not ask for packed ones
        accepted += [x.token.event_id for x in (await w.next("acks")).acks if x.accepted]
    assert sorted(accepted) == sorted(a.token.event_id for a in firsts)
    seconds = await _assignments(w, 2)
    assert {a.step for a in seconds} == {"second"}
    await w.packed([(a, {"n": 2}) for a in seconds])
    for t in ids:
        task = await _wait(node, t)
        assert task.status is TaskStatus.SUCCEEDED and task.steps["second"].result == {"n": 2}
    # the same result again: not the step's current attempt any more, refused by name
    await w.packed([(seconds[0], {"n": 3})])
    refused: list[Any] = []
    while not refused:
        refused = [x for x in (await w.next("acks")).acks if not x.accepted]
    assert refused[0].token == seconds[0].token
    assert "not the step's current attempt" in refused[0].reason
    assert len(_events(node, ids[0], EventType.STEP_SUCCEEDED)) == 2
    await w.close()


async def test_results_whose_columns_differ_end_the_stream_and_the_attempt_runs_again(
    start: Any,
) -> None:
    node, w, task_id, a = await _one_assigned(start)
    await w.packed([(a, {"n": 1})], cut=1)  # no task id for its one row
    async with asyncio.timeout(10):
        while not _events(node, task_id, EventType.STEP_FAILED):
            await asyncio.sleep(0.02)
    (failed,) = _events(node, task_id, EventType.STEP_FAILED)
    assert failed.payload.get("lost") and "columns differ" in failed.payload["error"]
    assert _events(node, task_id, EventType.STEP_SUCCEEDED) == []
    await w.close()
    w2 = RawWorker(f"127.0.0.1:{node.port}", name="w2")
    await w2.connect()
    again = (await w2.next("assign")).assignments[0]
    assert (again.step, again.attempt) == ("first", 2)
    await w2.close()


async def test_an_assignment_that_cannot_be_sent_fails_the_attempt(
    start: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The executor's own fault fails the attempt (and its retry runs), as a step's
    does: it is not left STARTED for the next primary."""
    node = await start()
    w = RawWorker(f"127.0.0.1:{node.port}")
    await w.connect()
    calls = 0
    real = WorkerConn.assign

    def once_broken(self: WorkerConn, *args: Any, **kwargs: Any) -> None:
        nonlocal calls
        calls += 1
        if calls == 1:
            raise ValueError("cannot encode the assignment")
        real(self, *args, **kwargs)

    monkeypatch.setattr(WorkerConn, "assign", once_broken)
    assert node.engine is not None
    task_id = (await node.engine.submit("pair", None)).task_id
    a = (await w.next("assign")).assignments[0]
    assert (a.step, a.attempt) == ("first", 2)
    (failed,) = _events(node, task_id, EventType.STEP_FAILED)
    assert "cannot encode the assignment" in failed.payload["error"]
    await w.close()


async def test_broken_columns_on_a_replaced_stream_spare_the_workers_new_one(
    start: Any,
) -> None:
    """The same worker process on a new stream: a last message read from its old
    one cannot lose the attempts the new one holds."""
    node = await start()
    w = RawWorker(f"127.0.0.1:{node.port}")
    await w.connect()
    assert node.engine is not None and node.dispatch is not None
    task_id = (await node.engine.submit("pair", None)).task_id
    a = (await w.next("assign")).assignments[0]
    old = node.dispatch.workers["w1"]
    again = RawWorker(f"127.0.0.1:{node.port}")
    again.instance = w.instance  # the same process, reconnected
    await again.connect(running=(running(a),))
    assert node.dispatch.workers["w1"] is not old
    node.dispatch.results(old, wpb.Results(ok_terms=[a.token.term]))  # columns differ
    await again.result(a, {"n": 1})
    b = (await again.next("assign")).assignments[0]
    assert b.step == "second"
    assert _events(node, task_id, EventType.STEP_FAILED) == []
    await w.close()
    await again.close()


async def test_columns_without_tokens_are_not_skipped(start: Any) -> None:
    node = await start()
    w = RawWorker(f"127.0.0.1:{node.port}")
    await w.connect()
    assert node.engine is not None and node.dispatch is not None
    task_id = (await node.engine.submit("pair", None)).task_id
    await w.next("assign")
    node.dispatch.results(node.dispatch.workers["w1"], wpb.Results(ok_task_ids=[task_id]))
    async with asyncio.timeout(10):
        while not _events(node, task_id, EventType.STEP_FAILED):
            await asyncio.sleep(0.02)
    (failed,) = _events(node, task_id, EventType.STEP_FAILED)
    assert "columns differ" in failed.payload["error"]
    await w.close()


def _deep(depth: int) -> Any:
    value: Any = 0
    for _ in range(depth):
        value = [value]
    return value


async def test_a_workers_result_nested_past_json_max_depth_fails_the_attempt_for_good(
    start: Any,
) -> None:
    """A result 200 levels deep from a worker (a whole StepResult or a packed row) was
    taken, and one a little deeper broke every later snapshot of the node. It fails its
    attempt for good naming the limit, as a result over payload_max_bytes does."""
    node, w, task_id, a = await _one_assigned(start)
    await w.result(a, _deep(200))
    task = await _wait(node, task_id)
    assert task.status is TaskStatus.FAILED
    step = task.steps["first"]
    assert step.final and step.attempt == 1
    assert step.error.startswith(
        "result rejected: a value in the payload is nested 200 levels deep, over the limit "
        "of 64 (json_max_depth). "
    )
    assert not _events(node, task_id, EventType.STEP_SUCCEEDED)
    assert node.store is not None
    await node.store.snapshot_now()
    # in columns, as this project's workers send them
    task_id = (await node.engine.submit("pair", None)).task_id  # type: ignore[union-attr]
    b = (await w.next("assign")).assignments[0]
    await w.packed([(b, _deep(65))])
    task = await _wait(node, task_id)
    assert "nested 65 levels deep, over the limit of 64" in task.steps["first"].error
    await w.close()


async def test_a_workers_heartbeat_details_past_json_max_depth_are_not_kept(
    start: Any,
) -> None:
    """Details 200 levels deep became the FAILED's heartbeat (and the retry's input);
    refused, the last good ones stay."""
    node, w, task_id, a = await _one_assigned(start)
    w.beating = False
    await w.heartbeat(running(a, {"rows": 500}))
    await w.heartbeat(running(a, _deep(200)))
    # ... then nothing: past the heartbeat timeout (1 s) the worker is cut off
    w2 = RawWorker(f"127.0.0.1:{node.port}", name="w2")
    await w2.connect()
    b = (await w2.next("assign", timeout=15)).assignments[0]
    assert b.attempt == 2 and b.last_heartbeat_json == b'{"rows":500}'
    failed = _events(node, task_id, EventType.STEP_FAILED)
    assert failed[0].payload["heartbeat"] == {"rows": 500}
    await w.close()
    await w2.close()


async def test_a_workers_failure_is_judged_by_the_mro_it_sent(start: Any) -> None:
    """The worker sends the exception's qualified name and its classes' names; the
    primary matches the step's rules against them (a ConnectionError's subclass of the
    worker's own, which the node never imported), and one from an older worker, with
    no names, by its short type name."""
    node, w, task_id, a = await _one_assigned(start)
    mro = [
        "flows.on.the.worker.Throttled",
        "builtins.ConnectionError",
        "builtins.OSError",
        "builtins.Exception",
        "builtins.BaseException",
    ]
    failure = wpb.StepFailure(error_type="Throttled", message="429", mro=mro)
    await w.result(a, failure=failure)
    b = (await w.next("assign")).assignments[0]
    old = wpb.StepFailure(error_type="ConnectionError", message="reset")  # no mro: older
    await w.result(b, failure=old)
    c = (await w.next("assign")).assignments[0]
    await w.result(c, {"n": 1})
    d = (await w.next("assign")).assignments[0]
    await w.result(d, {"n": 2})
    task = await _wait(node, task_id)
    assert task.status is TaskStatus.SUCCEEDED
    failed = [e.payload for e in _events(node, task_id, EventType.STEP_FAILED)]
    assert failed[0]["cause"] == {"type": mro[0], "mro": mro, "message": "429"}
    assert failed[0]["error"] == "Throttled: 429"
    assert failed[1]["cause"] == {"type": "ConnectionError", "mro": [], "message": "reset"}
    assert [f["rule"] for f in failed] == ["builtins.ConnectionError"] * 2
    assert [f["decision"] for f in failed] == [
        {"failures": 1, "attempts": 5},
        {"failures": 2, "attempts": 5},
    ]
    assert task.steps["first"].causes == {"builtins.ConnectionError": 2}
    await w.close()
