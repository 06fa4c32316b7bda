"""The public API end to end: a real node process, real gRPC, the real CLI."""

from __future__ import annotations

import asyncio
import json
import signal
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

from apollo11.scheduler.client import AlreadyExistsError, Client, SyncClient
from apollo11.scheduler.errors import FailedPreconditionError, InvalidArgumentError, NotFoundError
from apollo11.scheduler.log import EventLog
from tests.nodes import NodeProc, cli, start_node


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NodeProc]:
    n = start_node(tmp_path_factory.mktemp("api") / "data", "--allow-shell")
    yield n
    assert n.stop() == 0, "SIGTERM shuts the node down cleanly"


def test_submit_wait_inspect_with_the_cli(node: NodeProc, tmp_path: Path) -> None:
    ledger = tmp_path / "ledger"
    res = cli(
        "submit",
        "etl",
        "--input",
        json.dumps({"step_seconds": 0.01, "ledger": str(ledger)}),
        "--wait",
        server=node.address,
    )
    assert res.returncode == 0, res.stdout + res.stderr
    assert "persist SUCCEEDED" in res.stdout
    task_id = res.stdout.split("task ")[1].split()[0].strip()
    res = cli("task", task_id, "--json", server=node.address)
    task = json.loads(res.stdout)
    assert {k: task[k] for k in ("task_id", "workflow", "state")} == {
        "task_id": task_id,
        "workflow": "etl",
        "state": "SUCCEEDED",
    }
    assert [(s["name"], s["state"], s["attempt"], s["error"]) for s in task["steps"]] == [
        (n, "SUCCEEDED", 1, None) for n in ("collect", "clean", "feature", "infer", "persist")
    ]
    res = cli("events", "--task", task_id, "--json", server=node.address)
    kinds = [json.loads(line)["event_type"] for line in res.stdout.splitlines()]
    assert kinds == ["TASK_SUBMITTED"] + ["STEP_STARTED", "STEP_SUCCEEDED"] * 5
    assert len(ledger.read_text().splitlines()) == 5


def test_submit_quiet_prints_the_task_id_alone(node: NodeProc) -> None:
    res = cli("submit", "etl", "-q", "--input", '{"step_seconds": 0}', server=node.address)
    assert res.returncode == 0, res.stderr
    task_id = res.stdout.removesuffix("\n")
    assert "\n" not in task_id and " " not in task_id, res.stdout  # tid=$(apollo11 submit -q …)
    res = cli("task", task_id, "--json", server=node.address)
    assert json.loads(res.stdout)["task_id"] == task_id
    res = cli("submit", "etl", "-q", "--wait", server=node.address)
    assert res.returncode == 2 and "--quiet prints the task id alone" in res.stderr


def test_failing_task_exits_nonzero_then_operator_retry(node: NodeProc) -> None:
    inp = json.dumps({"step_seconds": 0, "fail_step": "infer", "fail_times": 9})
    res = cli("submit", "etl", "--input", inp, "--wait", server=node.address)
    assert res.returncode == 1, res.stdout
    task_id = res.stdout.split("task ")[1].split()[0].strip()
    res = cli("retry", task_id, "infer", "--reason", "r", "--operator", "", server=node.address)
    assert res.returncode == 0, "an empty --operator falls back to the login name"
    with SyncClient(node.address) as c:
        t = c.wait(task_id, check=False)
    assert t.state == "FAILED"  # fails again: fail_times=9, but the retry is on record
    infer = next(s for s in t.steps if s.name == "infer")
    assert infer.override is not None and infer.override["action"] == "retry"
    assert infer.attempt == 8, "4 attempts, then 4 more after the operator's retry"


def test_status_json_shape(node: NodeProc) -> None:
    res = cli("status", "--json", server=node.address)
    s = json.loads(res.stdout)
    assert s["role"] == "primary" and s["term"] >= 1
    assert s["leader"]["address"] == node.address
    assert set(s["lease"]) >= {"ttl_s", "remaining_s"}
    assert {"node_id", "role", "address", "last_event_id", "lag_events"} <= set(s["members"][0])


async def test_errors_name_fields_and_limits(node: NodeProc) -> None:
    async with Client(node.address, retries=0) as c:
        with pytest.raises(NotFoundError, match="unknown workflow 'nope'"):
            await c.submit("nope")
        with pytest.raises(NotFoundError, match="no task 'zzz'"):
            await c.task("zzz")
        with pytest.raises(
            InvalidArgumentError, match=r"input_json is \d+ bytes, over the 65536-byte limit"
        ):
            await c.submit("etl", {"blob": "x" * 70_000})
        with pytest.raises(
            InvalidArgumentError, match="idempotency_key is 300 characters, over the limit of 256"
        ):
            await c.submit("etl", idempotency_key="k" * 300)
        with pytest.raises(InvalidArgumentError, match="page_size is 5000, over the limit of 1000"):
            await c.tasks(page_size=5000)
        with pytest.raises(InvalidArgumentError, match=r"steps\[0\].idempotency"):
            await c.submit_shell({"steps": [{"name": "a", "run": "true"}]})
        sub = await c.submit("etl", {"step_seconds": 0})
        await c.wait(sub.task_id)
        with pytest.raises(FailedPreconditionError, match="SUCCEEDED"):
            await c.retry_step(sub.task_id, "clean", operator="o", reason="r")
        with pytest.raises(InvalidArgumentError, match="reason is required"):
            await c.cancel(sub.task_id, operator="o", reason="")
        with pytest.raises(FailedPreconditionError, match="already SUCCEEDED"):
            await c.cancel(sub.task_id, operator="o", reason="r")
    channel = grpc.aio.insecure_channel(node.address)
    with pytest.raises(grpc.aio.AioRpcError) as exc:
        await channel.unary_unary("/apollo11.v1.Scheduler/SubmitTask")(b"\xff\xff\xff")
    # Bytes that are not a message: a caller's mistake, named (gRPC alone says UNKNOWN).
    assert exc.value.code() is grpc.StatusCode.INVALID_ARGUMENT
    assert "not a valid apollo11.v1.SubmitTaskRequest" in (exc.value.details() or "")
    bad_utf8 = b"\x0a\x02\xff\xfe"  # field 1 (workflow), a string of two invalid bytes
    with pytest.raises(grpc.aio.AioRpcError) as exc:
        await channel.unary_unary("/apollo11.v1.Scheduler/SubmitTask")(bad_utf8)
    assert exc.value.code() is grpc.StatusCode.INVALID_ARGUMENT
    with pytest.raises(grpc.aio.AioRpcError) as exc:
        async for _ in channel.unary_stream("/apollo11.v1.Scheduler/WatchTask")(b"\xff\xff"):
            pass
    assert exc.value.code() is grpc.StatusCode.INVALID_ARGUMENT
    await channel.close()
    assert node.alive()


async def test_idempotent_submit_and_time_travel(node: NodeProc) -> None:
    async with Client(node.address) as c:
        a = await c.submit("etl", {"step_seconds": 0}, idempotency_key="nightly-2026-11-30")
        b = await c.submit("etl", {"step_seconds": 0}, idempotency_key="nightly-2026-11-30")
        assert a.task_id == b.task_id and a.created and not b.created
        with pytest.raises(AlreadyExistsError, match=f"already names task {a.task_id}"):
            await c.submit("etl", {"step_seconds": 9}, idempotency_key="nightly-2026-11-30")
        done = await c.wait(a.task_id)
        assert done.state == "SUCCEEDED"
        early = await c.task(a.task_id, as_of=a.event_id + 2)
        assert early.as_of_event_id == a.event_id + 2
        assert [s.state for s in early.steps][:2] == ["SUCCEEDED", "PENDING"]
        page = await c.tasks(state="SUCCEEDED", workflow="etl", page_size=1)
        assert len(page.tasks) == 1 and page.next_page_token
        page2 = await c.tasks(state="SUCCEEDED", page_size=1, page_token=page.next_page_token)
        assert page2.tasks[0].task_id < page.tasks[0].task_id


def test_shell_dag_through_the_api(node: NodeProc, tmp_path: Path) -> None:
    dag = {
        "name": "runbook",
        "steps": [
            {"name": "one", "run": "echo one", "idempotency": "idempotent"},
            {
                "name": "two",
                "run": "echo two; exit 4",
                "after": ["one"],
                "idempotency": "idempotent",
                "retry": {"attempts": 1},
            },
        ],
    }
    path = tmp_path / "dag.json"
    path.write_text(json.dumps(dag))
    res = cli("submit", "shell", "--input", f"@{path}", "--wait", server=node.address)
    assert res.returncode == 1
    assert "command exited with code 4" in res.stdout


def test_health_and_reflection(node: NodeProc) -> None:
    with grpc.insecure_channel(node.address) as ch:
        h = health_pb2_grpc.HealthStub(ch).Check(health_pb2.HealthCheckRequest(service=""))
        assert h.status == health_pb2.HealthCheckResponse.SERVING
        h = health_pb2_grpc.HealthStub(ch).Check(
            health_pb2.HealthCheckRequest(service="apollo11.v1.Scheduler")
        )
        assert h.status == health_pb2.HealthCheckResponse.SERVING
        stub = reflection_pb2_grpc.ServerReflectionStub(ch)
        responses = stub.ServerReflectionInfo(
            iter([reflection_pb2.ServerReflectionRequest(list_services="")])
        )
        names = {s.name for r in responses for s in r.list_services_response.service}
    assert {"apollo11.v1.Scheduler", "apollo11.v1.Cluster", "grpc.health.v1.Health"} <= names


def test_sigterm_lets_acknowledged_work_finish(tmp_path: Path) -> None:
    n = start_node(tmp_path / "d")
    with SyncClient(n.address) as c:
        sub = c.submit("etl", {"step_seconds": 0.5})
        import time

        time.sleep(0.7)
    assert n.stop(signal.SIGTERM) == 0
    out = n.proc.stdout.read() if n.proc.stdout else ""
    assert "stopped" in out
    log = EventLog.open(n.data_dir, read_only=True)
    kinds = [e.event_type.name for e in log.read() if e.task_id == sub.task_id]
    log.close_sync()
    # the step that was running finished (drain) before the node exited
    assert kinds.count("STEP_STARTED") == kinds.count("STEP_SUCCEEDED")


async def test_submit_many_in_one_call(node: NodeProc, tmp_path: Path) -> None:
    async with Client(node.address, retries=0) as c:
        before = (await c.status()).last_event_id
        first = await c.submit("etl", {"step_seconds": 0}, idempotency_key="batch-old")
        subs = await c.submit_many(
            [
                {"workflow": "etl", "input": {"step_seconds": 0}, "idempotency_key": "b-1"},
                {"workflow": "etl", "input": {"step_seconds": 0}},
                {"workflow": "etl", "input": {"step_seconds": 0}, "idempotency_key": "b-1"},
                # the same key and the same submission: the same task (another input
                # would be ALREADY_EXISTS)
                {"workflow": "etl", "input": {"step_seconds": 0}, "idempotency_key": "batch-old"},
            ]
        )
        assert [s.created for s in subs] == [True, True, False, False]
        assert subs[2].task_id == subs[0].task_id and subs[3].task_id == first.task_id
        assert subs[1].event_id == subs[0].event_id + 1, "one append: consecutive events"
        for s in subs:
            await c.wait(s.task_id)
        with pytest.raises(NotFoundError, match=r"tasks\[1\]: unknown workflow 'nope'"):
            await c.submit_many([{"workflow": "etl"}, {"workflow": "nope"}])
        with pytest.raises(InvalidArgumentError, match=r"tasks\[0\].input_json is \d+ bytes"):
            await c.submit_many([{"workflow": "etl", "input": {"blob": "x" * 70_000}}])
        with pytest.raises(InvalidArgumentError, match="tasks has 1001 items; send 1 to 1000"):
            await c.submit_many([{"workflow": "etl"}] * 1001)
        with pytest.raises(InvalidArgumentError, match="tasks has 0 items"):
            await c.submit_many([])
        after = (await c.status()).last_event_id
    # nothing of the refused batches was written: 3 tasks of 11 events each
    assert after - before == 3 * 11

    lines = tmp_path / "tasks.jsonl"
    lines.write_text(
        "\n".join(
            json.dumps({"workflow": "etl", "input": {"step_seconds": 0}, "idempotency_key": k})
            for k in ("cli-1", "cli-2", "cli-1")
        )
    )
    res = cli("submit-many", str(lines), "--json", server=node.address)
    assert res.returncode == 0, res.stdout + res.stderr
    out = json.loads(res.stdout)
    assert [o["created"] for o in out] == [True, True, False]
    again = cli("submit-many", str(lines), "--json", server=node.address)
    assert [o["created"] for o in json.loads(again.stdout)] == [False, False, False]
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"workflow": "etl"}\n{"input": 1}\n')
    res = cli("submit-many", str(bad), server=node.address)
    assert res.returncode == 2 and 'line 2: expected an object with a "workflow"' in res.stderr


def test_tables_in_a_pipe_are_plain_columns_with_nothing_cut(node: NodeProc) -> None:
    with SyncClient(node.address) as c:
        sub = c.submit("etl", {"step_seconds": 0})
        c.wait(sub.task_id)
    res = cli("tasks", "--limit", "5", server=node.address)  # stdout is a pipe here
    assert res.returncode == 0, res.stderr
    lines = res.stdout.splitlines()
    assert lines[0].split() == ["task", "workflow", "state", "steps", "submitted", "updated"]
    assert not any(ch in res.stdout for ch in "┃│┏━…"), "no boxes, nothing truncated"
    row = next(line for line in lines if line.startswith(sub.task_id))
    assert row.split()[:4] == [sub.task_id, "etl", "SUCCEEDED", "5/5"]
    res = cli("status", server=node.address)
    assert node.address in res.stdout.split(), res.stdout  # the whole address, as a word


def test_submitted_text_is_not_markup_to_the_cli(node: NodeProc) -> None:
    """Red-team finding: a step error holding '[/bold]' made `apollo11 events` crash
    with rich's MarkupError, so an operator could not look at that task."""
    with SyncClient(node.address) as c:
        sub = c.submit("etl", {"step_seconds": "[/bold][link=http://x]"})
        c.wait(sub.task_id, check=False)  # it fails: its input is nonsense on purpose
    res = cli("events", "--task", sub.task_id, server=node.address)
    assert res.returncode == 0, res.stderr
    assert "[/bold][link=http://x]" in res.stdout
    res = cli("task", sub.task_id, server=node.address)
    assert res.returncode == 0, res.stderr


def test_the_workflows_command_lists_what_is_loaded(node: NodeProc) -> None:
    res = cli("workflows", "--json", server=node.address)
    assert res.returncode == 0, res.stderr
    loaded = {(w["name"], w["version"]): w for w in json.loads(res.stdout)}
    etl = loaded[("etl", 1)]
    assert not etl["durable"]
    assert [(s["name"], s["idempotency"]) for s in etl["steps"]] == [
        ("collect", "idempotent"),
        ("clean", "idempotent"),
        ("feature", "checkpoint"),
        ("infer", "dedupe_key"),
        ("persist", "dedupe_key"),
    ]
    assert etl["steps"][1]["after"] == ["collect"] and etl["steps"][0]["attempts"] == 4
    assert loaded[("approval", 1)]["durable"]
    plain = cli("workflows", server=node.address)  # a pipe: plain columns
    rows = [line.split()[:3] for line in plain.stdout.splitlines()]
    assert ["etl", "1", "dag"] in rows and ["approval", "1", "durable"] in rows


def test_a_typed_input_is_checked_at_submit_and_the_steps_get_the_model(node: NodeProc) -> None:
    with SyncClient(node.address) as c:
        with pytest.raises(InvalidArgumentError) as e:
            c.submit("invoice", {"customer": {}, "amount_cents": "5x"})
        assert "input.customer.id: Field required" in str(e.value)
        assert "input.amount_cents: Input should be a valid integer" in str(e.value)
        with pytest.raises(InvalidArgumentError, match=r"tasks\[1\]: input.coupon: Extra"):
            c.submit_many(
                [
                    {"workflow": "invoice", "input": {"customer": {"id": "a"}, "amount_cents": 1}},
                    {"workflow": "invoice", "input": {"customer": {"id": "b"}, "amount_cents": 1,
                                                      "coupon": "x"}},
                ]
            )  # fmt: skip
        assert not c.tasks(workflow="invoice").tasks, "nothing of a refused batch is written"
        sub = c.submit("invoice", {"customer": {"id": "c7"}, "amount_cents": 250})
        results = c.result(sub.task_id, timeout=30)
        assert results["issue"] == {"invoice": "inv-c7", "total_cents": 250, "currency": "EUR"}
        described = c.workflow("invoice")
        assert described["input_schema"]["required"] == ["customer", "amount_cents"]
        assert c.workflow("etl")["input_schema"] is None
        with pytest.raises(NotFoundError, match="unknown workflow 'nope'"):
            c.workflow("nope")
    res = cli("workflows", "--json", server=node.address)
    listed = {w["name"]: w for w in json.loads(res.stdout)}
    assert listed["invoice"]["input_schema"]["additionalProperties"] is False
    res = cli("submit", "invoice", "--input", '{"amount_cents": 1}', server=node.address)
    assert res.returncode != 0 and "input.customer: Field required" in res.stderr, res.stderr


def test_a_typed_result_is_described_and_read_as_the_model(node: NodeProc) -> None:
    from apollo11.scheduler.examples import InvoiceResult

    with SyncClient(node.address) as c:
        sub = c.submit("invoice", {"customer": {"id": "r1"}, "amount_cents": 40})
        typed = c.result(sub.task_id, timeout=30, model=InvoiceResult)
        assert typed == InvoiceResult(invoice="inv-r1", total_cents=40, currency="EUR")
        assert c.result(sub.task_id)["issue"] == typed.model_dump(), "untyped: each step's"
        # a model the recorded result does not fit (another version of it, say): named
        from pydantic import BaseModel

        class Receipt(BaseModel):
            receipt_id: str

        with pytest.raises(FailedPreconditionError) as e:
            c.result(sub.task_id, model=Receipt)
        said = str(e.value)
        assert f"task {sub.task_id} (invoice): its recorded result does not fit Receipt" in said
        assert said.endswith("result.receipt_id: Field required"), said
        described = c.workflow("invoice")
        assert described["result_schema"]["required"] == ["invoice", "total_cents", "currency"]
        assert c.workflow("etl")["result_schema"] is None
    res = cli("workflows", "--json", server=node.address)
    listed = {w["name"]: w for w in json.loads(res.stdout)}
    assert listed["invoice"]["result_schema"]["title"] == "InvoiceResult"
    assert listed["invoice"]["input_schema"]["title"] == "InvoiceInput"
    assert listed["etl"]["result_schema"] is None and listed["etl"]["input_schema"] is None


def test_a_workflow_submitted_as_itself_gives_a_typed_handle(node: NodeProc) -> None:
    """Issue 33, part 3: the handle's result() is the workflow's result model (its
    types: tests/scheduler/client/test_typed_handles.py); by name, as before."""
    from apollo11.scheduler.examples import Customer, InvoiceInput, InvoiceResult, invoice

    order = InvoiceInput(customer=Customer(id="h1"), amount_cents=70, currency="USD")
    with SyncClient(node.address) as c:
        h = c.submit(invoice, order, idempotency_key="typed-h1")
        assert h.created and h.workflow == "invoice" and h.event_id > 0
        assert h.result(timeout=30) == InvoiceResult(
            invoice="inv-h1", total_cents=70, currency="USD"
        )
        assert h.wait().state == "SUCCEEDED" and h.task().task_id == h.task_id
        again = c.submit(invoice, order, idempotency_key="typed-h1")
        assert (again.task_id, again.created) == (h.task_id, False)
        by_name = c.submit("invoice", {"customer": {"id": "h2"}, "amount_cents": 5})
        assert by_name.result(timeout=30)["issue"]["invoice"] == "inv-h2"
        with pytest.raises(TypeError, match=r"submit takes a Workflow or a workflow.s name"):
            c.submit(invoice.steps["price"].fn)  # type: ignore[call-overload]

    async def go() -> InvoiceResult:
        async with Client(node.address) as ac:
            h = await ac.submit(invoice, order.model_copy(update={"amount_cents": 9}))
            return await h.result(timeout=30)

    assert asyncio.run(go()).total_cents == 9


def test_a_shell_dag_keeps_its_name(node: NodeProc) -> None:
    dag = {"name": "nightly", "steps": [{"name": "a", "run": "true", "idempotency": "idempotent"}]}
    with SyncClient(node.address) as c:
        sub = c.submit_shell(dag)
        assert c.wait(sub.task_id).state == "SUCCEEDED"
    shown = cli("task", sub.task_id, server=node.address).stdout
    assert f"task {sub.task_id} (shell nightly v1)" in shown, shown
    # and in the lists: the API's rows, `apollo11 tasks` and its --json
    with SyncClient(node.address) as c:
        etl = c.submit("etl", {"step_seconds": 0}).task_id
        row = next(t for t in c.tasks(workflow="shell").tasks if t.task_id == sub.task_id)
        other = next(t for t in c.tasks(workflow="etl").tasks if t.task_id == etl)
    assert (row.workflow, row.name) == ("shell", "shell nightly")
    assert (other.workflow, other.name) == ("etl", "etl")
    listed = cli("tasks", "--workflow", "shell", server=node.address).stdout.splitlines()
    line = next(x for x in listed if x.startswith(sub.task_id))
    assert line.split("  ")[1].strip() == "shell nightly", listed
    as_json = cli("tasks", "--workflow", "shell", "--json", server=node.address).stdout
    mine = next(t for t in json.loads(as_json) if t["task_id"] == sub.task_id)
    assert (mine["workflow"], mine["name"]) == ("shell", "shell nightly")
