"""The worker's results as messages: every outcome carried, batches bounded."""

from __future__ import annotations

import pytest

from apollo11.scheduler.worker._codec import (
    RESULTS_BATCH_BYTES,
    ProtocolError,
    dispatch,
    register,
    registration,
    results,
)
from apollo11.scheduler.worker._records import (
    Ack,
    Acks,
    Assign,
    Cancelled,
    Failed,
    Result,
    Succeeded,
    Token,
)
from apollo11.v1 import worker_pb2 as pb


def _r(event_id: int, outcome: Succeeded | Failed | Cancelled) -> Result:
    return Result(Token(4, event_id), f"t{event_id}", "clean", 2, outcome, 0.25)


def test_each_outcome_is_carried_in_one_message() -> None:
    batch = [
        _r(1, Succeeded(b'{"rows": 1}')),
        _r(2, Failed("ValueError", "bad row", b'{"row": 7}', declared=True)),
        _r(3, Cancelled()),
    ]
    (m,) = results(batch)
    got = [
        (r.token.term, r.token.event_id, r.task_id, r.step, r.attempt, r.seconds)
        for r in m.results.results
    ]
    assert got == [(4, i, f"t{i}", "clean", 2, 0.25) for i in (1, 2, 3)]
    ok, failed, cancelled = m.results.results
    assert ok.WhichOneof("outcome") == "result_json" and ok.result_json == b'{"rows": 1}'
    assert failed.WhichOneof("outcome") == "failure"
    f = failed.failure
    assert (f.error_type, f.message, f.details_json, f.declared) == (
        "ValueError",
        "bad row",
        b'{"row": 7}',
        True,
    )
    assert cancelled.WhichOneof("outcome") == "cancelled" and cancelled.cancelled
    assert results([]) == []


def test_big_results_are_split_under_the_bound() -> None:
    body = b'"' + b"x" * (1024 * 1024) + b'"'  # 1 MiB each
    out = results([_r(i, Succeeded(body)) for i in range(10)])
    assert [len(m.results.results) for m in out] == [3, 3, 3, 1]
    assert all(m.ByteSize() <= RESULTS_BATCH_BYTES for m in out)
    assert [r.token.event_id for m in out for r in m.results.results] == list(range(10))


def test_acks_packed_or_whole_read_as_the_same_records() -> None:
    m = pb.DispatchMessage(acks=pb.Acks(accepted_term=5, accepted_event_ids=[20, 21]))
    m.acks.acks.add(accepted=False, reason="not taken: cancelled").token.event_id = 19
    assert dispatch(m) == Acks(
        (
            Ack(Token(5, 20), True, ""),
            Ack(Token(5, 21), True, ""),
            Ack(Token(0, 19), False, "not taken: cancelled"),
        )
    )
    reg = register(
        name="w", instance="i", slots=1, workflows=(), labels={}, running=(), version="0"
    )
    assert reg.register.packed_acks  # this worker reads them: it says so


def test_packed_succeeded_results_go_in_columns_and_the_rest_whole() -> None:
    batch = [
        _r(1, Succeeded(b'{"rows": 1}')),
        _r(2, Failed("ValueError", "bad row", b"{}", declared=False)),
        _r(3, Succeeded(b"null")),
        _r(4, Cancelled()),
    ]
    (m,) = results(batch, packed=True)
    r = m.results
    assert [x.token.event_id for x in r.results] == [2, 4]
    rows = list(
        zip(
            r.ok_terms,
            r.ok_event_ids,
            r.ok_task_ids,
            r.ok_steps,
            r.ok_attempts,
            r.ok_results_json,
            r.ok_seconds,
            strict=True,
        )
    )
    assert rows == [
        (4, 1, "t1", "clean", 2, b'{"rows": 1}', 0.25),
        (4, 3, "t3", "clean", 2, b"null", 0.25),
    ]
    # not packed (a primary that does not read columns): a message each, as before
    (whole,) = results(batch)
    assert len(whole.results.results) == 4 and not whole.results.ok_event_ids


def test_packed_results_are_split_under_the_bound_each_message_with_its_columns() -> None:
    body = b'"' + b"x" * (1024 * 1024) + b'"'  # 1 MiB each
    batch = [_r(i, Succeeded(body)) for i in range(10)]
    out = results(batch, packed=True)
    assert [list(m.results.ok_event_ids) for m in out] == [[0, 1, 2], [3, 4, 5], [6, 7, 8], [9]]
    assert all(m.ByteSize() <= RESULTS_BATCH_BYTES for m in out)


def test_the_registration_says_whether_the_primary_reads_columns() -> None:
    def reg(**fields: bool) -> pb.DispatchMessage:
        return pb.DispatchMessage(registered=pb.Registered(node_id="n1", term=2, **fields))

    assert registration(reg(packed_results=True)).packed_results
    assert not registration(reg()).packed_results  # an older primary: a message each


def test_assignments_in_columns_read_as_the_same_records() -> None:
    m = pb.DispatchMessage(
        assign=pb.Assign(
            node_id="n2",
            terms=[7, 7],
            event_ids=[40, 41],
            task_ids=["ta", "tb"],
            steps=["load", "clean"],
            attempts=[1, 3],
            workflows=["etl", "etl"],
            versions=[2, 2],
            inputs_json=[b"{}", b"[1]"],
            results_json=[b"{}", b'{"load": 1}'],
            timeouts_s=[60.0, 5.0],
        )
    )
    whole = m.assign.assignments.add(task_id="tc", step="main", attempt=1, node_id="n2")
    whole.token.term, whole.token.event_id = 7, 39
    d = dispatch(m)
    assert isinstance(d, Assign)
    assert [(a.token, a.task_id, a.step, a.attempt) for a in d.assignments] == [
        (Token(7, 39), "tc", "main", 1),
        (Token(7, 40), "ta", "load", 1),
        (Token(7, 41), "tb", "clean", 3),
    ]
    b = d.assignments[2]
    assert (b.workflow, b.version, b.input_json, b.results_json, b.timeout_s) == (
        "etl",
        2,
        b"[1]",
        b'{"load": 1}',
        5.0,
    )
    assert (b.node_id, b.durable, b.traceparent, b.last_heartbeat_json) == ("n2", None, "", b"")
    del m.assign.steps[1]  # a broken primary: the stream ends, naming why
    with pytest.raises(ProtocolError, match="columns differ in length"):
        dispatch(m)
    reg = register(
        name="w", instance="i", slots=1, workflows=(), labels={}, running=(), version="0"
    )
    assert reg.register.packed_assignments
