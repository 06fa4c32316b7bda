"""Fuzz every request field against a running node: no crash, no partial or stray event."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import grpc
import orjson
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from apollo11.scheduler.log import EventLog, EventType
from apollo11.v1 import scheduler_pb2 as pb
from apollo11.v1 import scheduler_pb2_grpc as pbg
from tests.secure import make_pki, start_secure_node

text = st.one_of(
    st.text(max_size=40),
    st.text(min_size=200, max_size=400),
    st.sampled_from(["etl", "shell", "collect", "infer", "", " ", "ETL", "../etc", "\x00"]),
)
json_text = st.one_of(
    text,
    st.recursive(
        st.none()
        | st.booleans()
        | st.integers(-(2**63), 2**63 - 1)  # what a JSON encoder accepts
        | st.floats(allow_nan=False, allow_infinity=False)
        | st.text(max_size=20),
        lambda c: st.lists(c, max_size=4) | st.dictionaries(st.text(max_size=8), c, max_size=4),
        max_leaves=10,
    ).map(lambda v: orjson.dumps(v).decode()),
    st.just('{"step_seconds": 0}'),
    st.just('{"steps": [{"name": "a", "run": "true", "idempotency": "idempotent"}]}'),
)
u64 = st.integers(0, 2**64 - 1)
u32 = st.integers(0, 2**32 - 1)

valid_input = st.dictionaries(
    st.sampled_from(["step_seconds", "batch", "note"]),
    st.integers(0, 0) | st.text(max_size=10),
    max_size=3,
).map(lambda d: orjson.dumps(d).decode())

requests = st.one_of(
    # Mostly-valid requests, so the success paths get fuzzed too.
    st.builds(
        lambda i, k: (
            "SubmitTask",
            pb.SubmitTaskRequest(workflow="etl", input_json=i, idempotency_key=k),
        ),
        valid_input,
        st.sampled_from(["", "k1", "k2", "k3"]),
    ),
    st.builds(
        lambda f, n: ("GetEvents", pb.GetEventsRequest(from_event_id=f, limit=n)),
        st.integers(0, 200),
        st.integers(1, 100),
    ),
    st.builds(
        lambda s, w, n: ("ListTasks", pb.ListTasksRequest(state=s, workflow=w, page_size=n)),
        st.integers(0, 5),
        st.sampled_from(["", "etl", "shell"]),
        st.integers(0, 100),
    ),
    st.builds(
        lambda w, i, k, v: (
            "SubmitTask",
            pb.SubmitTaskRequest(workflow=w, input_json=i, idempotency_key=k, version=v),
        ),
        text,
        json_text,
        text,
        st.integers(0, 3),
    ),
    st.builds(
        lambda d, k: ("SubmitShell", pb.SubmitShellRequest(dag_json=d, idempotency_key=k)),
        json_text,
        text,
    ),
    st.builds(lambda t, a: ("GetTask", pb.GetTaskRequest(task_id=t, as_of_event_id=a)), text, u64),
    st.builds(
        lambda s, w, n, tok: (
            "ListTasks",
            pb.ListTasksRequest(state=s, workflow=w, page_size=n, page_token=tok),
        ),
        st.integers(0, 9),
        text,
        u32,
        text,
    ),
    st.builds(
        lambda t, f, to, n: (
            "GetEvents",
            pb.GetEventsRequest(task_id=t, from_event_id=f, to_event_id=to, limit=n),
        ),
        text,
        u64,
        u64,
        st.integers(0, 20_000),
    ),
    st.builds(
        lambda t, s, o, r: (
            "RetryStep",
            pb.StepActionRequest(task_id=t, step=s, operator=o, reason=r),
        ),
        text,
        text,
        text,
        text,
    ),
    st.builds(
        lambda t, s, o, r: (
            "SkipStep",
            pb.StepActionRequest(task_id=t, step=s, operator=o, reason=r),
        ),
        text,
        text,
        text,
        text,
    ),
    st.builds(
        lambda items: ("SubmitTasks", pb.SubmitTasksRequest(tasks=items)),
        st.lists(
            st.builds(
                lambda w, i, k: pb.SubmitTaskRequest(workflow=w, input_json=i, idempotency_key=k),
                st.sampled_from(["etl", "etl", "nope", ""]),
                valid_input | json_text,
                st.sampled_from(["", "k1", "k4", "k5"]),
            ),
            max_size=5,
        ),
    ),
    st.builds(
        lambda t, o, r: ("CancelTask", pb.CancelTaskRequest(task_id=t, operator=o, reason=r)),
        text,
        text,
        text,
    ),
)

OK_CODES = {
    grpc.StatusCode.NOT_FOUND,
    grpc.StatusCode.INVALID_ARGUMENT,
    grpc.StatusCode.FAILED_PRECONDITION,
    grpc.StatusCode.ALREADY_EXISTS,  # a fuzzed idempotency key reused with another input
}
WRITES = {
    "SubmitTask": EventType.TASK_SUBMITTED,
    "SubmitShell": EventType.TASK_SUBMITTED,
    "RetryStep": EventType.MANUAL_OVERRIDE,
    "SkipStep": EventType.MANUAL_OVERRIDE,
    "CancelTask": EventType.TASK_CANCELLED,
}


def test_fuzzed_requests_never_crash_the_node_or_write_half_an_event(tmp_path: Path) -> None:
    # With authentication on, as a cluster beyond loopback runs: TLS, an operator's token.
    pki = make_pki(tmp_path)
    node = start_secure_node(tmp_path, pki, "--allow-shell")
    channel = grpc.secure_channel(node.address, pki.channel_creds())
    stub = pbg.SchedulerStub(channel)
    auth = (("authorization", f"Bearer {pki.tokens['operator']}"),)
    written: Counter[EventType] = Counter()
    codes: Counter[str] = Counter()

    @settings(max_examples=400, deadline=None, suppress_health_check=list(HealthCheck))
    @given(call=requests)
    def one(call: tuple[str, object]) -> None:
        method, request = call
        try:
            resp = getattr(stub, method)(request, timeout=10, metadata=auth)
        except grpc.RpcError as e:
            codes[e.code().name] += 1
            assert e.code() in OK_CODES, f"{method}({request}) -> {e.code()}: {e.details()}"
            return
        codes["OK"] += 1
        if method == "SubmitTasks":
            written[EventType.TASK_SUBMITTED] += sum(1 for t in resp.tasks if t.created)
        elif method in WRITES and getattr(resp, "created", True):
            written[WRITES[method]] += 1

    try:
        one()
        assert node.alive()
        # Also a watch on a task that does not exist.
        try:
            list(stub.WatchTask(pb.WatchTaskRequest(task_id="nope"), timeout=5, metadata=auth))
        except grpc.RpcError as e:
            assert e.code() is grpc.StatusCode.NOT_FOUND
    finally:
        channel.close()
        assert node.stop() == 0
    assert codes["OK"] > 20 and codes["INVALID_ARGUMENT"] > 20, codes
    log = EventLog.open(node.data_dir, read_only=True)  # every record whole and checked
    found = Counter(e.event_type for e in log.read())
    log.close_sync()
    for kind, n in written.items():
        assert found[kind] == n, f"{kind.name}: {n} acknowledged, {found[kind]} in the log"
